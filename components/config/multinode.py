"""A model served across nodes: one LeaderWorkerSet group per replica (``multiNode``).

Two ways vLLM 0.11 spans nodes (both rendered by ``components/compile/multinode.py``):

- ``ray``: tensor parallel inside each node, pipeline parallel across nodes, over a Ray cluster
  per group (Ray head on the leader, the workers join it; the image's own Ray).
- ``dataParallel``: one engine per data-parallel rank, no Ray: the leader runs the API server and
  its local ranks, every worker runs its ranks ``--headless`` and reaches the leader's
  data-parallel RPC port (optionally with expert parallelism, for mixture-of-experts models).

Paths in problems are relative to the model, as in ``rules.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from pydantic import Field

from .kube import INT32_MAX
from .sources import source_type
from .types import Strict
from .values import Problem

if TYPE_CHECKING:
    from .model import ModelConfig

# The Ray head's GCS port (`ray start --head --port`; Ray's own default).
RAY_PORT = 6379
# The leader's data-parallel RPC port (vLLM `--data-parallel-rpc-port`); set explicitly.
DATA_PARALLEL_RPC_PORT = 13345


class MultiNode(Strict):
    """Serve the model across `nodes` pods (one per node), as a LeaderWorkerSet group per replica."""

    nodes: int = Field(
        ge=2, le=64, description="Pods per group, one per node: the leader and `nodes - 1` workers. Each "
        "pod takes the model's `gpus` (the node's share), so a group holds `nodes × gpus` GPUs.",
    )
    mode: Literal["ray", "dataParallel"] = Field(
        "ray", description="`ray`: tensor parallel (`tensorParallelSize`) inside a node and pipeline "
        "parallel across nodes over Ray (`--distributed-executor-backend ray`; the Ray head runs on the "
        "leader, workers join it). For dense models too big for one node. `dataParallel`: no Ray; "
        "`gpus / tensorParallelSize` data-parallel ranks per node (`--data-parallel-size`, workers "
        "`--headless`), optionally with `expertParallel`. For mixture-of-experts models (e.g. DeepSeek).",
    )
    pipeline_parallel_size: Optional[int] = Field(
        None, ge=1, description="`ray` only: pipeline-parallel degree. Unset: `nodes` (one stage per "
        "node). `tensorParallelSize × pipelineParallelSize` must equal `nodes × gpus`.",
    )
    expert_parallel: bool = Field(
        False, description="`dataParallel` only: shard the experts of a mixture-of-experts model across "
        "every rank (`--enable-expert-parallel`) instead of replicating them.",
    )
    weights: Literal["shared", "perPod"] = Field(
        "shared", description="`shared`: one volume (`weights.accessMode: ReadWriteMany`) pulled once by the "
        "puller Job and verified by the weights gate before any group pod exists. `perPod`: a volume per pod "
        "(the LeaderWorkerSet's `volumeClaimTemplates`, `weights.size` each, any access mode: for node-local "
        "disks without ReadWriteMany storage); every pod pulls into its own volume and verifies it in init "
        "containers before its server starts: `nodes × replicas` pulls and copies. Not for `source.type: pvc`. "
        "See docs/multi-node.md.",
    )

    @property
    def per_pod(self) -> bool:
        return self.weights == "perPod"

    @property
    def ray(self) -> bool:
        return self.mode == "ray"

    def pipeline_size(self) -> int:
        return self.pipeline_parallel_size or self.nodes


def multinode_problems(model: ModelConfig) -> list[Problem]:
    """What a multi-node model cannot be (each with the fix)."""
    spec = model.multi_node
    if spec is None:
        return []
    problems: list[Problem] = []
    if model.engine != "vllm":
        problems.append(Problem("multiNode", "multi-node serving is offered for vLLM models (LeaderWorkerSet); "
                         "remove multiNode, or use engine: vllm"))
    if spec.per_pod:
        if source_type(model.source) == "pvc":
            problems.append(Problem("multiNode.weights", "an existing claim (source.type: pvc) is one volume, it "
                             "cannot be one per pod: set multiNode.weights: shared with a ReadWriteMany claim, or "
                             "pull per pod from the store or the hub (source.type: s3 or hf)"))
        if getattr(model.source, "service_account_name", None):
            problems.append(Problem("source.serviceAccountName", "per-pod weights are pulled inside the server "
                             "pods, which keep the platform's identity-less ServiceAccount: give the store's keys "
                             "through source.credentials, or set multiNode.weights: shared (the puller Job runs "
                             "as this ServiceAccount)"))
    elif model.weights.access_mode != "ReadWriteMany":
        problems.append(Problem("weights.accessMode", "every pod of a multi-node group mounts the shared weights, "
                         "on different nodes: set weights.accessMode: ReadWriteMany (pulled once and shared), or "
                         "multiNode.weights: perPod (a volume per pod, each pulled and verified: for node-local "
                         "disks)"))
    if model.autoscaling.enabled:
        problems.append(Problem("autoscaling.enabled", "a multi-node model scales by whole groups, which the "
                         "Deployment autoscaler does not do; set replicas instead"))
    if model.lora.enabled:
        problems.append(Problem("lora.enabled", "LoRA adapters are prepared per pod for one-pod servers; "
                         "multi-node models do not offer them: remove lora or multiNode"))
    # The LWS webhook refuses a LeaderWorkerSet whose pods (replicas × size) pass int32 (found by
    # the dry-run property test: each count alone was in range).
    if model.replicas * spec.nodes > INT32_MAX:
        problems.append(Problem("replicas", f"{model.replicas} groups × {spec.nodes} nodes is more pods than a "
                         f"LeaderWorkerSet takes (at most {INT32_MAX}); lower replicas"))
    if spec.ray:
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
