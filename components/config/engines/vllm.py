"""vLLM (`engine: vllm`, the default): open models from a weight source, on GPUs or on CPU
(``gpus: 0``), one pod or a group of them (``multiNode``), with LoRA adapters, queue-depth
autoscaling, `load: stream` and next revisions. Its image runs one of vLLM's release lines, whose
flags and variables ``config/vllm_checks.py`` checks; its server is
``components/compile/engines/vllm.py``."""

from __future__ import annotations

from typing import Optional

from ..values import Problem
from .base import SERVER_PORT, Engine, Model

_LORA_ENV = "set with LoRA; use lora.enabled"


class Vllm(Engine):
    name = "vllm"
    label = "vLLM"
    health_path = "/health"
    identity = (2000, 0)  # the image's `vllm` user
    identity_keys = ("vllm_uid", "vllm_gid")
    release_lines = True
    # vLLM reads `--flag value` and `--flag=value`, and its parser (FlexibleArgumentParser) also
    # takes `_` for `-` in flag names; booleans take `--no-<flag>` (managed.flag_name).
    managed_flags = {
        "--model": "the model is the weights volume the puller fills; set source.repo (and source.revision)",
        "--served-model-name": "the model is served under its name; set name",
        "--host": "the server listens on every address so the Service reaches it; remove it",
        "--port": f"the probes and the Service use {SERVER_PORT}; remove it",
        "--tensor-parallel-size": "set tensorParallelSize (and gpus to a multiple of it)",
        "-tp": "set tensorParallelSize (and gpus to a multiple of it)",
        "--enable-lora": "set lora.enabled",
        "--max-loras": "set lora.maxLoras",
        "--max-lora-rank": "set lora.maxLoraRank",
        "--download-dir": "the weights are downloaded by the puller onto the weights volume; remove it",
        "--hf-token": "a token in args is plain text in the manifest; set hfTokenSecret",
    }
    managed_env = {
        "HF_HUB_OFFLINE": "the server reads the weights from the volume and never the hub; remove it",
        "HOME": "a writable home for the non-root user; remove it",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": _LORA_ENV,
        # Issue 15 item 4's adapter resolver, set with LoRA: refused ahead of the compiler using them.
        "VLLM_PLUGINS": _LORA_ENV,
        "VLLM_LORA_RESOLVER_CACHE_DIR": _LORA_ENV,
    }

    def resolve_path(self, path: Optional[str]) -> Optional[str]:
        if path is not None:
            raise ValueError(
                "path applies to NIM models only (vLLM models always deploy as raw objects); remove it"
            )
        return path

    def settings_problems(self, model: Model) -> list[Problem]:
        return [Problem("nim", "NIM settings apply to engine 'nim' only; remove them")] if model.nim else []

    def multinode_problems(self, model: Model) -> list[Problem]:
        spec, problems = model.multi_node, []
        if spec.mpi:
            problems.append(Problem("multiNode.mode", "mpi is the NIM operator's launcher; vLLM spans nodes with "
                                    "ray or dataParallel: set multiNode.mode: ray (or dataParallel)"))
        elif spec.ray:
            if spec.expert_parallel:
                problems.append(Problem("multiNode.expertParallel", "expert parallel is offered in mode "
                                 "dataParallel; remove it, or set multiNode.mode: dataParallel"))
            world = model.tensor_parallel_size * spec.pipeline_size()
            if world != spec.nodes * model.gpus:
                problems.append(Problem("multiNode.pipelineParallelSize", f"tensorParallelSize {model.tensor_parallel_size} × "
                                 f"pipelineParallelSize {spec.pipeline_size()} = {world} GPUs, but a group has "
                                 f"{spec.nodes} × {model.gpus} = {spec.nodes * model.gpus}; make them equal (e.g. "
                                 f"tensorParallelSize {model.gpus} and pipelineParallelSize {spec.nodes})"))
        elif spec.pipeline_parallel_size is not None:
            problems.append(Problem("multiNode.pipelineParallelSize", "pipeline parallel is offered in mode ray; "
                             "remove it, or set multiNode.mode: ray"))
        return problems


VLLM = Vllm()
