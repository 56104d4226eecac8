"""CPU servers: a model server labelled `llm-serving.dev/device: cpu` (a CPU model, `gpus: 0`) is
vLLM's CPU server. It must ask for no GPU, and carry what that server needs to stay inside its
container: a CPU limit its engine threads match, and a KV cache sized in whole GiB below its memory
limit (unset, vLLM sizes the KV cache from the node's memory, not the container's, and binds a
thread to every core of a NUMA node whatever the CPU limit). Every other server is held to its
GPUs by ``gpu.gpu_limits``; the label decides which of the two rules a server answers to.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any, Optional

from .base import resource_rule
from .gpu import GPU_CONFIG, gpu_amounts, wants_gpu
from .kube import (
    COMPONENT_LABEL,
    CPU_DEVICE,
    DEVICE_LABEL,
    POD_KINDS,
    SERVER,
    UNKNOWN,
    Finding,
    K8sObject,
    as_list,
    get,
    labelled,
    pod_containers,
    unchecked,
    unknowns,
    violation,
)

KV_CACHE, THREADS, BIND = "VLLM_CPU_KVCACHE_SPACE", "OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND"
ENGINE_CONTAINER = "server"
GIB = Decimal(2**30)
_QUANTITY = re.compile(r"^([0-9.]+)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_SCALE = {None: 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def amount(value: Any) -> Optional[Decimal]:
    """A CPU or memory quantity in base units (cores, bytes); None when unparsable."""
    if value is None or isinstance(value, bool):
        return None
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    try:
        return Decimal(match.group(1)) * _SCALE[match.group(2)]
    except InvalidOperation:
        return None


def is_cpu_server(obj: K8sObject) -> tuple[bool, list[Finding]]:
    """Whether the object is a CPU model's server (both labels known), and what is unknown."""
    component, findings = labelled(obj, COMPONENT_LABEL, "component")
    if component != SERVER:
        return False, findings
    device, more = labelled(obj, DEVICE_LABEL, "device")
    return device == CPU_DEVICE, findings + more


@resource_rule(
    "llm-serving-cpu-server-settings",
    "A CPU model's server (label llm-serving.dev/device: cpu) requests no GPU, and its `server` "
    "container sets a whole-number CPU limit equal to its request, OMP_NUM_THREADS equal to that "
    "limit, VLLM_CPU_OMP_THREADS_BIND, and VLLM_CPU_KVCACHE_SPACE as whole GiB below its memory "
    "limit (without them vLLM's CPU server sizes its KV cache from the node's memory and starts a "
    "thread on every core of a NUMA node: the container is OOM-killed or throttled).",
    POD_KINDS,
    fix="Render CPU models with this program (stack config models[].gpus: 0, sized by "
    "models[].resources.cpu and .memory, or .kvCache); a server that needs GPUs sets gpus >= 1 "
    "and loses the device label.",
    severity="high", url="https://docs.vllm.ai/en/stable/getting_started/installation/cpu.html",
    config=GPU_CONFIG,
)
def cpu_server_settings(obj: K8sObject, config: dict) -> Iterator[Finding]:
    cpu_server, findings = is_cpu_server(obj)
    yield from findings
    if not cpu_server:
        return
    gpu = config["gpuResourceName"]
    refs, _, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    for ref in refs:
        request, limit = gpu_amounts(ref.container, gpu)
        if request is UNKNOWN or limit is UNKNOWN:
            yield unchecked(f"{obj.display}: {ref.path} resources")
        elif wants_gpu(request, limit):
            yield violation(f"{obj.display} is a CPU server (label {DEVICE_LABEL}: {CPU_DEVICE}) but {ref.path} "
                            f"asks for {gpu}; remove it, or make the model a GPU model")
    engine = [ref for ref in refs if get(ref.container, "name") == ENGINE_CONTAINER]
    if not engine:
        if unknown_paths or any(get(ref.container, "name") is UNKNOWN for ref in refs):
            yield unchecked(f"{obj.display}: its `{ENGINE_CONTAINER}` container")
        else:
            yield violation(f"{obj.display} is a CPU server with no `{ENGINE_CONTAINER}` container to check")
        return
    yield from _engine_settings(obj, engine[0].path, engine[0].container)


def _engine_settings(obj: K8sObject, path: str, container: Any) -> Iterator[Finding]:
    resources = get(container, "resources")
    env = as_list(get(container, "env"))
    amounts = [get(resources, kind, name) for kind in ("limits", "requests") for name in ("cpu", "memory")]
    if resources is UNKNOWN or env is UNKNOWN or UNKNOWN in amounts:
        yield unchecked(f"{obj.display}: {path} resources and env")
        return
    values = {get(e, "name"): get(e, "value") for e in env}
    if UNKNOWN in values or UNKNOWN in values.values():
        yield unchecked(f"{obj.display}: {path}.env")
        return
    cpu_limit, cpu_request = get(resources, "limits", "cpu"), get(resources, "requests", "cpu")
    memory = amount(get(resources, "limits", "memory"))
    limit = amount(cpu_limit)
    if limit is None or limit < 1 or limit != limit.to_integral_value():
        yield violation(f"{obj.display}: {path} has CPU limit {cpu_limit!r}; a CPU server's engine threads are its "
                        "CPU limit: set limits.cpu to a whole number of CPUs")
    elif cpu_request is not None and amount(cpu_request) != limit:
        yield violation(f"{obj.display}: {path} requests {cpu_request} CPUs but limits {cpu_limit}; make them equal")
    elif values.get(THREADS) != str(int(limit)):
        yield violation(f"{obj.display}: {path} sets {THREADS}={values.get(THREADS)!r} with a CPU limit of "
                        f"{int(limit)}; set {THREADS} to {int(limit)} (one engine thread per CPU)")
    if not values.get(BIND):
        yield violation(f"{obj.display}: {path} sets no {BIND}: vLLM's default binds a thread to every core of "
                        "a NUMA node, whatever the CPU limit; set it to no binding (`all` on vLLM 0.11, `nobind` "
                        "later: the threads run inside the pod's cores)")
    kv_cache = values.get(KV_CACHE)
    if kv_cache is None or not str(kv_cache).isdigit() or int(kv_cache) < 1:
        yield violation(f"{obj.display}: {path} sets {KV_CACHE}={kv_cache!r}; vLLM's CPU server then sizes its KV "
                        "cache from the node's memory: set it to whole GiB below the memory limit")
    elif memory is None or int(kv_cache) * GIB >= memory:
        yield violation(f"{obj.display}: {path} sets {KV_CACHE}={kv_cache} GiB, not below its memory limit "
                        f"({get(resources, 'limits', 'memory')!r}); lower it or raise limits.memory")
