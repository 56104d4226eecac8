"""GPU servers: an explicit GPU limit, and a size-limited in-memory /dev/shm.

Tensor-parallel workers exchange tensors through /dev/shm; the runtime's default 64Mi makes NCCL
fail, and an unlimited memory volume can eat the node.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any, Optional

from .base import resource_rule
from .kube import (
    COMPONENT_LABEL,
    CPU_DEVICE,
    DEVICE_LABEL,
    GPU_RESOURCE,
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

SHM_PATH = "/dev/shm"
GPU_CONFIG = {
    "gpuResourceName": {"type": "string", "default": GPU_RESOURCE,
                        "description": "Extended resource name of a GPU."},
}


def quantity(value: Any) -> Optional[Decimal]:
    """A GPU count (always a plain number for extended resources); None when unparsable."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None


def _show(value: Any) -> str:
    parsed = quantity(value)
    return str(value) if parsed is None else f"{parsed.normalize():f}"


def gpu_amounts(container: Any, gpu: str) -> tuple[Any, Any]:
    return get(container, "resources", "requests", gpu), get(container, "resources", "limits", gpu)


def wants_gpu(request: Any, limit: Any) -> bool:
    return any(v is not None and (quantity(v) is None or quantity(v) > 0) for v in (request, limit))


@resource_rule(
    "llm-serving-gpu-shm-size-limit",
    "Every container that requests GPUs mounts an in-memory emptyDir with a sizeLimit at /dev/shm "
    "(tensor parallel needs more than the runtime's 64Mi; without a limit it can eat the node).",
    POD_KINDS | {"NIMService"},
    fix="Add volume `{name: dshm, emptyDir: {medium: Memory, sizeLimit: 16Gi}}` mounted at /dev/shm "
    "(stack config platform.sharedMemorySizeLimit); for NIMService set "
    "spec.storage.sharedMemorySizeLimit.",
    severity="high", url="https://kubernetes.io/docs/concepts/storage/volumes/#emptydir",
    config=GPU_CONFIG,
)
def shm_size_limit(obj: K8sObject, config: dict) -> Iterator[Finding]:
    if obj.kind == "NIMService":
        limit = get(obj.props, "spec", "storage", "sharedMemorySizeLimit")
        if limit is UNKNOWN:
            yield unchecked(f"{obj.display}: spec.storage.sharedMemorySizeLimit")
        elif limit in (None, ""):
            yield violation(f"{obj.display}: spec.storage.sharedMemorySizeLimit is unset, so /dev/shm "
                            "has no cap; set it (e.g. 16Gi)")
        return
    gpu = config["gpuResourceName"]
    refs, _, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    gpu_refs = []
    for ref in refs:
        request, limit = gpu_amounts(ref.container, gpu)
        if request is UNKNOWN or limit is UNKNOWN:
            yield unchecked(f"{obj.display}: {ref.path} resources")
        elif wants_gpu(request, limit):
            gpu_refs.append(ref)
    if not gpu_refs:
        return
    spec_path, spec = obj.pod_spec()
    volumes = as_list(get(spec, "volumes"))
    if volumes is UNKNOWN:
        yield unchecked(f"{obj.display}: {spec_path}.volumes")
        return
    by_name = {get(v, "name"): v for v in volumes if isinstance(get(v, "name"), str)}
    for ref in gpu_refs:
        mounts = as_list(get(ref.container, "volumeMounts"))
        if mounts is UNKNOWN:
            yield unchecked(f"{obj.display}: {ref.path}.volumeMounts")
            continue
        paths = [get(m, "mountPath") for m in mounts]
        if UNKNOWN in paths and SHM_PATH not in paths:
            yield unchecked(f"{obj.display}: {ref.path}.volumeMounts mountPath")
            continue
        names = [get(m, "name") for m in mounts if get(m, "mountPath") == SHM_PATH]
        if not names:
            yield violation(f"{obj.display}: {ref.path} requests GPUs but mounts nothing at {SHM_PATH}; "
                            "mount an emptyDir {medium: Memory, sizeLimit: ...} there")
            continue
        name = names[0]
        if name is UNKNOWN or any(v is UNKNOWN or get(v, "name") is UNKNOWN for v in volumes):
            yield unchecked(f"{obj.display}: the volume mounted at {SHM_PATH}")
            continue
        volume = by_name.get(name)
        if volume is None:
            yield violation(f"{obj.display}: {ref.path} mounts volume '{name}' at {SHM_PATH}, but "
                            "the pod declares no such volume")
            continue
        empty_dir = get(volume, "emptyDir")
        medium = get(empty_dir, "medium")
        size_limit = get(empty_dir, "sizeLimit")
        if empty_dir is UNKNOWN or medium is UNKNOWN or size_limit is UNKNOWN:
            yield unchecked(f"{obj.display}: volume '{name}'")
        elif empty_dir is None or medium != "Memory":
            yield violation(f"{obj.display}: volume '{name}' at {SHM_PATH} is not an in-memory "
                            "emptyDir; use emptyDir {medium: Memory, sizeLimit: ...}")
        elif size_limit in (None, ""):
            yield violation(f"{obj.display}: volume '{name}' at {SHM_PATH} has no sizeLimit; set "
                            "emptyDir.sizeLimit (it counts against the container's memory)")


@resource_rule(
    "llm-serving-gpu-limits",
    "Server pods set an nvidia.com/gpu limit, equal to the request where one is given (extended "
    "resources are scheduled by their limit; without it the server lands on a node with no GPU). "
    "CPU models' servers (label llm-serving.dev/device: cpu) answer to llm-serving-cpu-server-settings "
    "instead.",
    POD_KINDS,
    fix="Set resources.limits[\"nvidia.com/gpu\"] on the server container to the model's GPU count "
    "(stack config models[].gpus; a model served on CPUs sets gpus: 0, which labels its server).",
    severity="high", url="https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/",
    config=GPU_CONFIG,
)
def gpu_limits(obj: K8sObject, config: dict) -> Iterator[Finding]:
    component, findings = labelled(obj, COMPONENT_LABEL, "component")
    yield from findings
    if component != SERVER:
        return
    device, findings = labelled(obj, DEVICE_LABEL, "device")
    yield from findings
    if device == CPU_DEVICE or findings:  # a CPU server: cpu.cpu_server_settings holds it to no GPU
        return
    gpu = config["gpuResourceName"]
    refs, _, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    limited = False
    undecided = bool(unknown_paths)
    for ref in refs:
        request, limit = gpu_amounts(ref.container, gpu)
        if request is UNKNOWN or limit is UNKNOWN:
            yield unchecked(f"{obj.display}: {ref.path} resources")
            undecided = True
            continue
        if limit is not None:
            parsed = quantity(limit)
            if parsed is None or parsed != parsed.to_integral_value() or parsed < 0:
                yield violation(f"{obj.display}: {ref.path} limits.{gpu} '{limit}' is not a whole "
                                "number of GPUs")
                continue
            limited = limited or parsed > 0
        if request is not None and limit is None:
            yield violation(f"{obj.display}: {ref.path} requests {_show(request)} {gpu} but sets no "
                            f"limit; set resources.limits[\"{gpu}\"]: {_show(request)}")
        elif request is not None and quantity(request) != quantity(limit):
            yield violation(f"{obj.display}: {ref.path} requests {_show(request)} {gpu} but limits "
                            f"{_show(limit)}; make them equal")
    if refs and not limited and not undecided:
        yield violation(f"{obj.display} is a model server with no {gpu} limit on any container; "
                        f"set resources.limits[\"{gpu}\"] on the server container")


@resource_rule(
    "llm-serving-nim-multinode-shape",
    "A multi-node NIMService (spec.multiNode) sizes its group the way the NIM operator reads it "
    "(k8s-nim-operator v3.1.2): parallelism.pipeline is the LeaderWorkerSet's size and must be at "
    "least 2 (at 1 the operator renders a Deployment yet waits for a LeaderWorkerSet, so it never "
    "reports Ready); parallelism.tensor is each pod's GPUs and must equal the nvidia.com/gpu "
    "limit every pod of the group gets from spec.resources; spec.args is left out of the "
    "operator's LeaderWorkerSet, so it must be unset.",
    {"NIMService"},
    fix="Stack config models[].multiNode.nodes >= 2, tensorParallelSize = gpus, no args (pass NIM "
    "settings as env).",
    severity="high",
    config=GPU_CONFIG,
)
def nim_multinode_shape(obj: K8sObject, config: dict) -> Iterator[Finding]:
    multi = get(obj.props, "spec", "multiNode")
    if multi is UNKNOWN:
        yield unchecked(f"{obj.display}: spec.multiNode")
        return
    if multi is None:
        return
    pipeline, tensor = get(multi, "parallelism", "pipeline"), get(multi, "parallelism", "tensor")
    gpus = get(obj.props, "spec", "resources", "limits", config["gpuResourceName"])
    if UNKNOWN in (pipeline, tensor, gpus):
        yield unchecked(f"{obj.display}: spec.multiNode.parallelism / spec.resources")
        return
    if not isinstance(pipeline, int) or pipeline < 2:
        yield violation(f"{obj.display}: spec.multiNode.parallelism.pipeline is {pipeline!r}; the operator "
                        "spans nodes only from 2 (one pipeline stage per pod)")
    if tensor is None or quantity(tensor) != quantity(gpus):
        yield violation(f"{obj.display}: spec.multiNode.parallelism.tensor is {tensor!r} but each pod gets "
                        f"{_show(gpus)} GPUs (spec.resources.limits); make them equal")
    args = get(obj.props, "spec", "args")
    if args is UNKNOWN:
        yield unchecked(f"{obj.display}: spec.args")
    elif args:
        yield violation(f"{obj.display}: spec.args is set, but the operator's LeaderWorkerSet leaves it out; "
                        "pass NIM settings as env")
