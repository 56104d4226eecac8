"""CPU models (``gpus: 0``): a vLLM model served by vLLM's CPU server, and what that server cannot do.

Why ``gpus: 0`` and not a ``device: cpu`` switch: the count is what the pod asks the scheduler
for, and zero GPUs is exactly what changes (no ``nvidia.com/gpu``, no GPU node placement, the CPU
image). A second switch could contradict the count (``device: cpu`` with ``gpus: 4``) and would
need writing twice, since ``gpus`` defaults to 1; vLLM itself takes no device flag for it either:
its CPU build is another image, which detects the platform.

What the CPU server gets (``components/compile/cpu.py`` renders it; read in the 0.11.0 and 0.32.0
wheels, ``vllm/platforms/cpu.py``, ``vllm/v1/worker/cpu_worker.py``, ``vllm/envs.py``):

- ``VLLM_CPU_KVCACHE_SPACE``, the KV cache in whole GiB. Unset, 0.11 takes 4 GiB whatever the
  container has, and 0.32 sizes it from ``--gpu-memory-utilization`` × the *node's* memory (not
  the container's limit): either way an OOM kill waiting for a node. So it is always rendered:
  ``resources.kvCache``, else ``⌊(memory − 3 GiB) / 2⌋`` GiB — 3 GiB of headroom for the
  runtime (Python processes with torch loaded — API server and engine core on 0.11, and a worker
  on 0.32 — resident beside the KV cache with the tiny test model, compiled: 2.05 GiB on 0.11,
  2.8 GiB on 0.32, measured 2026-12-07), then half of the rest for the KV cache and half for the
  weights and activations. ``--gpu-memory-utilization``
  has no effect once it is set, so it is refused.
- ``OMP_NUM_THREADS`` = ``resources.cpu`` (a whole number), which is also the container's CPU
  limit (requests = limits: the CPU quota is the threads' count; a pod whose every container does
  the same — no LoRA init container, no pylon sidecar — is Guaranteed, and a kubelet with the
  static CPU manager policy gives it whole cores of its own), and ``VLLM_CPU_OMP_THREADS_BIND`` set to the line's "no
  binding" (``all`` on 0.11, ``nobind`` on 0.32: ``ReleaseLine.cpu_unbound``; 0.11 reads
  ``nobind`` as a core list and fails): the engine runs that many OpenMP threads and the kernel
  places them inside the pod's cpuset. Explicit core lists are
  not rendered: the kubelet picks the cores (the static policy hands out exclusive ones, often
  not from 0; binding outside the cpuset fails in ``sched_setaffinity``), and 0.11's binding
  (``init_cpu_threads_env``) also sets the NUMA memory policy, which the runtime's default
  seccomp profile allows only with CAP_SYS_NICE, a capability the pods drop. ``auto`` binds every core of the NUMA node, ignoring
  the CPU limit.
- ``USER``: the upstream CPU image has root only, so the pod's uid has no passwd entry, and torch
  asks ``getpass.getuser()`` (which reads ``USER`` first) for its compile cache while vLLM imports
  its layers: without it the server dies with ``getpwuid(): uid not found``.

Refused, each with its fix: NIM (its images need GPUs), multi-node and every parallel degree
above one (the CPU backend runs Ray never and one rank per pod here), GGUF weights (the CPU
backend has no GGUF kernels), the flags and variables above, and ``VLLM_CPU_*`` variables on a GPU
model (nothing reads them there): ``model.cpu_problems``, with this module's tables and its checks
of the args and of ``resources``; the CPU image (``platform.cpu_image``) and its line are the
platform's. Paths are relative to the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from . import managed, values
from .values import Problem

GIB = 2**30
# Kept free of the KV cache for the runtime: the API server and the engine core, each a Python
# process with torch loaded.
RUNTIME_HEADROOM_GIB = 3
# The smallest memory a derived KV cache fits in: the headroom + 1 GiB KV + 1 GiB weights.
MIN_MEMORY_GIB = RUNTIME_HEADROOM_GIB + 2

# The name getpass.getuser() reports in a CPU server (compile/cpu.py server_env says why).
USER = "vllm"

_KV_FIX = "set from resources.memory (or resources.kvCache, to size it yourself); remove it"
# Server environment the compiler sets on a CPU model -> what to do instead.
MANAGED_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": _KV_FIX,
    "OMP_NUM_THREADS": "one engine thread per CPU of the container: set resources.cpu",
    "USER": "the name the pod's uid goes by (vLLM's CPU image has no passwd entry for it); remove it",
    "VLLM_CPU_OMP_THREADS_BIND": (
        "set to no binding: the threads (resources.cpu) run inside the cores the kubelet gives the pod; a "
        "core list would have to name cores the kubelet picks, and binding needs CAP_SYS_NICE, which the "
        "pod drops; remove it"),
}
ONE_RANK = "a CPU model runs one engine per pod (the threads of resources.cpu); scale with replicas: remove it"
# vLLM flags a CPU model cannot use -> why and the fix.
REFUSED_FLAGS = {
    "--distributed-executor-backend": "the CPU backend runs one rank per pod here and never on Ray; remove it",
    "--pipeline-parallel-size": ONE_RANK,
    "-pp": ONE_RANK,
    "--data-parallel-size": ONE_RANK,
    "-dp": ONE_RANK,
    "--data-parallel-size-local": ONE_RANK,
    "-dpl": ONE_RANK,
    "--enable-expert-parallel": ONE_RANK,
    "-ep": ONE_RANK,
    "--gpu-memory-utilization": "has no effect on the CPU server, whose KV cache is VLLM_CPU_KVCACHE_SPACE "
                                "(from resources.memory, or resources.kvCache); remove it",
    "--device-memory-utilization": "has no effect on the CPU server, whose KV cache is VLLM_CPU_KVCACHE_SPACE "
                                   "(from resources.memory, or resources.kvCache); remove it",
    "--kv-cache-memory-bytes": "the KV cache is VLLM_CPU_KVCACHE_SPACE: set resources.kvCache",
}
# Flags whose value `gguf` asks for GGUF weights.
_GGUF_FLAGS = ("--load-format", "--quantization", "-q")


















def arg_problems(args: Iterable[str]) -> list[Problem]:
    problems: list[Problem] = []
    words = [(index, word) for index, arg in enumerate(args) for word in arg.split()]
    reported: set[int] = set()
    for position, (index, word) in enumerate(words):
        name = managed.flag_name(word)
        if name is None or index in reported:
            continue
        if name in REFUSED_FLAGS:
            problems.append(Problem(f"args.{index}", f"{name} on a CPU model: {REFUSED_FLAGS[name]}"))
            reported.add(index)
        elif name in _GGUF_FLAGS and _value(word, words, position) == "gguf":
            problems.append(Problem(f"args.{index}", "GGUF weights: vLLM's CPU backend has no GGUF kernels; serve "
                                    "the model's safetensors (source.repo), or set gpus"))
            reported.add(index)
    return problems


def _value(word: str, words: list[tuple[int, str]], position: int) -> Optional[str]:
    """The value of a flag written `--flag=value` or `--flag value`, lower-cased."""
    if "=" in word:
        return word.split("=", 1)[1].lower()
    following = words[position + 1][1] if position + 1 < len(words) else None
    return following.lower() if following is not None else None


# A model's `resources` (cpu, memory, kvCache) come in as their quantities: this module never
# sees the model (tests/config/test_config_import_contract.py).


def kv_cache_gib(memory: str, kv_cache: Optional[str]) -> int:
    """The KV cache of a CPU model, whole GiB: ``resources.kvCache``, else derived from the memory."""
    if kv_cache is not None:
        return int(values.parse_quantity(kv_cache) // GIB)
    return int((values.parse_quantity(memory) - RUNTIME_HEADROOM_GIB * GIB) / 2 // GIB)


def threads(cpu: str) -> int:
    """The engine's threads: ``resources.cpu`` (a whole number)."""
    return int(values.parse_quantity(cpu))


def resource_problems(cpu_quantity: str, memory_quantity: str, kv_cache: Optional[str]) -> list[Problem]:
    """A CPU model's ``resources`` (a whole number of CPUs, a KV cache that fits its memory)."""
    problems = []
    cpu = values.parse_quantity(cpu_quantity)
    if cpu < 1 or cpu != cpu.to_integral_value():
        whole = max(1, int(cpu))
        problems.append(Problem("resources.cpu", f"'{cpu_quantity}': a CPU model runs one engine thread per "
                                "CPU (OMP_NUM_THREADS), with a CPU limit equal to it; write a whole number of CPUs, "
                                f"e.g. '{whole}'"))
    memory = values.parse_quantity(memory_quantity)
    if kv_cache is None:
        if memory < MIN_MEMORY_GIB * GIB:
            problems.append(Problem("resources.memory", f"{memory_quantity} is too little for a CPU model: its "
                                    f"KV cache is (memory − {RUNTIME_HEADROOM_GIB}Gi) / 2, at least 1Gi, beside the "
                                    f"runtime and the weights; set at least {MIN_MEMORY_GIB}Gi (or size "
                                    "resources.kvCache yourself)"))
        return problems
    size = values.parse_quantity(kv_cache)
    if size < GIB or size % GIB:
        problems.append(Problem("resources.kvCache", f"'{kv_cache}': vLLM's CPU backend takes the KV cache in whole "
                                f"GiB (VLLM_CPU_KVCACHE_SPACE); write e.g. '{max(1, int(size // GIB))}Gi'"))
    elif size + RUNTIME_HEADROOM_GIB * GIB > memory:
        problems.append(Problem("resources.kvCache", f"{kv_cache} leaves less than {RUNTIME_HEADROOM_GIB}Gi of "
                                f"resources.memory ({memory_quantity}) for the runtime, and the weights "
                                "need room too: lower it, or raise resources.memory"))
    return problems
