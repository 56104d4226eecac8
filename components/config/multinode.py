"""A model served across nodes: one LeaderWorkerSet group per replica (``multiNode``).

Two ways vLLM 0.11 spans nodes (both rendered by ``components/compile/multinode.py``):

- ``ray``: tensor parallel inside each node, pipeline parallel across nodes, over a Ray cluster
  per group (Ray head on the leader, the workers join it; the image's own Ray).
- ``dataParallel``: one engine per data-parallel rank, no Ray: the leader runs the API server and
  its local ranks, every worker runs its ranks ``--headless`` and reaches the leader's
  data-parallel RPC port (optionally with expert parallelism, for mixture-of-experts models).

NIM on the operator path (``engine: nim``, ``path: operator``): the NIMService's own ``multiNode``
(``components/compile/nim.py``); the k8s-nim-operator renders the LeaderWorkerSet. Its launcher is
``ray`` (NIM for LLMs 2.x and later form a Ray cluster) or ``mpi`` (NIM 1.x TensorRT-LLM images).

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
    mode: Literal["ray", "dataParallel", "mpi"] = Field(
        "ray", description="`ray`: tensor parallel (`tensorParallelSize`) inside a node and pipeline "
        "parallel across nodes over Ray (`--distributed-executor-backend ray`; the Ray head runs on the "
        "leader, workers join it). For dense models too big for one node. `dataParallel` (vLLM): no Ray; "
        "`gpus / tensorParallelSize` data-parallel ranks per node (`--data-parallel-size`, workers "
        "`--headless`), optionally with `expertParallel`. For mixture-of-experts models (e.g. DeepSeek). "
        "NIM (operator path): `ray` for NIM for LLMs 2.x and later images, `mpi` for NIM 1.x "
        "(TensorRT-LLM) images; the NIM operator starts either.",
    )
    pipeline_parallel_size: Optional[int] = Field(
        None, ge=1, description="`ray` only: pipeline-parallel degree. Unset: `nodes` (one stage per "
        "node). `tensorParallelSize × pipelineParallelSize` must equal `nodes × gpus`. NIM: always "
        "`nodes` (the operator makes one stage per node), and `tensorParallelSize` must equal `gpus`.",
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

    @property
    def mpi(self) -> bool:
        return self.mode == "mpi"

    def pipeline_size(self) -> int:
        return self.pipeline_parallel_size or self.nodes


# Env the NIM operator sets on every pod of a multi-node group (k8s-nim-operator v3.1.2,
# api/apps/v1alpha1/nimservice_types.go getLWSCommonEnv / GetLWSLeaderEnv / GetLWSWorkerEnv). Its
# merge lets NIMService `env` win over them, so a user entry would silently break the group.
NIM_MULTINODE_ENV = (
    "NIM_MULTI_NODE", "NIM_NUM_COMPUTE_NODES", "NIM_TENSOR_PARALLEL_SIZE", "NIM_PIPELINE_PARALLEL_SIZE",
    "NIM_NODE_RANK", "NIM_LEADER_ROLE", "NIM_MPI_ALLOW_RUN_AS_ROOT", "GPUS_PER_NODE", "CLUSTER_START_TIMEOUT",
    "CLUSTER_SIZE", "GROUP_INDEX", "LEADER_NAME", "LWS_NAME", "NAMESPACE", "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_plm_rsh_args",
)
# Set to 0 by the compiler in ray mode: NIM for LLMs (2.x docs, "Multi-Node Deployment", known
# limitations) has no JSON log formatter on Ray workers, and the operator sets it to 1 by default.
NIM_JSONL_LOGGING = "NIM_JSONL_LOGGING"


def multinode_problems(model: ModelConfig) -> list[Problem]:
    """What a multi-node model cannot be (each with the fix)."""
    spec = model.multi_node
    if spec is None or model.gpus == 0:  # a CPU model's multiNode is refused whole (cpu.py)
        return []
    if model.engine == "nim" and not model.on_operator:
        # The NIM container's multi-node contract (NIM_LEADER_ROLE / NIM_NODE_RANK, the MPI ssh
        # keys and start script, or `nim-serve-ray`) is the operator's to render; copying it here
        # would duplicate the operator and drift with each NIM release.
        return [Problem("multiNode", "multi-node NIM is rendered by the NIM operator (NIMService multiNode: it "
                        "starts the group's Ray or MPI cluster and sets each pod's rank); the raw path does not "
                        "render that: set path: operator (and nim.authSecret), or remove multiNode")]
    problems: list[Problem] = []
    if spec.per_pod:
        if model.on_operator:
            # The NIMCache is one PVC, which the operator mounts in every pod of every group.
            problems.append(Problem("multiNode.weights", "the NIM operator mounts its NIMCache's one volume in "
                                    "every pod of a group: per-pod volumes are not offered on the operator path; "
                                    "set multiNode.weights: shared with weights.accessMode: ReadWriteMany"))
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
        if model.on_operator:
            problems.append(Problem("weights.accessMode", "every pod of a multi-node group mounts the NIMCache's "
                                    "volume, on different nodes: set weights.accessMode: ReadWriteMany (the NIMCache "
                                    "PVC is created with it and the operator mounts it in the leader and every worker)"))
        else:
            problems.append(Problem("weights.accessMode", "every pod of a multi-node group mounts the shared weights, "
                             "on different nodes: set weights.accessMode: ReadWriteMany (pulled once and shared), or "
                             "multiNode.weights: perPod (a volume per pod, each pulled and verified: for node-local "
                             "disks)"))
    if model.autoscaling.enabled:
        if model.on_operator:
            problems.append(Problem("autoscaling.enabled", "the NIM operator refuses multiNode together with "
                                    "autoscaling (its CRD rule: autoScaling must be nil or disabled when multiNode "
                                    "is set); a multi-node NIMService runs `replicas` groups: remove autoscaling "
                                    "and set replicas"))
        else:
            problems.append(Problem("autoscaling.enabled", "a multi-node model scales by whole groups, which the "
                             "Deployment autoscaler does not do; set replicas instead"))
    if model.lora.enabled and model.engine == "vllm":  # NIM refuses lora on both paths (effect.py)
        problems.append(Problem("lora.enabled", "LoRA adapters are prepared per pod for one-pod servers; "
                         "multi-node models do not offer them: remove lora or multiNode"))
    # The LWS webhook refuses a LeaderWorkerSet whose pods (replicas × size) pass int32 (found by
    # the dry-run property test: each count alone was in range).
    if model.replicas * spec.nodes > INT32_MAX:
        problems.append(Problem("replicas", f"{model.replicas} groups × {spec.nodes} nodes is more pods than a "
                         f"LeaderWorkerSet takes (at most {INT32_MAX}); lower replicas"))
    if model.engine == "nim":
        return problems + _nim_operator_problems(model, spec)
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


def _nim_operator_problems(model: ModelConfig, spec: MultiNode) -> list[Problem]:
    """The NIM operator's multi-node contract (k8s-nim-operator v3.1.2): the LeaderWorkerSet's size is
    ``parallelism.pipeline`` (one stage per pod), ``parallelism.tensor`` is each pod's GPU count
    (its ``GPUS_PER_NODE``), every pod gets the NIMService's resources, and the LWS template runs its
    own container arguments (the NIMService's ``args`` are not in it)."""
    problems: list[Problem] = []
    if spec.mode == "dataParallel":
        problems.append(Problem("multiNode.mode", "the NIM operator starts a group over Ray (NIM for LLMs 2.x and "
                                "later) or MPI (NIM 1.x TensorRT-LLM images); set multiNode.mode: ray or mpi"))
    if spec.expert_parallel:
        problems.append(Problem("multiNode.expertParallel", "the NIM operator has no expert-parallel setting (NIM "
                                "picks it from its profile); remove it"))
    if spec.pipeline_parallel_size is not None and spec.pipeline_parallel_size != spec.nodes:
        problems.append(Problem("multiNode.pipelineParallelSize", f"the NIM operator runs one pipeline stage per "
                                f"pod (parallelism.pipeline is the group's size): {spec.pipeline_parallel_size} "
                                f"stages need {spec.pipeline_parallel_size} nodes, not {spec.nodes}; set it to "
                                f"{spec.nodes}, or remove it"))
    if model.tensor_parallel_size != model.gpus:
        problems.append(Problem("tensorParallelSize", f"the NIM operator runs tensor parallel across each pod's GPUs "
                                f"(parallelism.tensor is its GPUs per node): tensorParallelSize "
                                f"{model.tensor_parallel_size} × {spec.nodes} nodes would not use the group's "
                                f"{spec.nodes} × {model.gpus} GPUs; set tensorParallelSize: {model.gpus}"))
    if model.args:
        problems.append(Problem("args", "the NIM operator's LeaderWorkerSet runs its own container arguments and "
                                "leaves the NIMService's args out (k8s-nim-operator v3.1.2); pass NIM settings as env, "
                                "or remove args"))
    managed = NIM_MULTINODE_ENV + ((NIM_JSONL_LOGGING,) if spec.ray else ())
    for name in sorted(n for n in model.env if n in managed):
        why = ("set to 0 in ray mode: NIM has no JSON log formatter on Ray workers" if name == NIM_JSONL_LOGGING
               else "set by the NIM operator on every pod of a multi-node group (rank, sizes, launcher)")
        problems.append(Problem(f"env.{name}", f"{why}; remove it"))
    return problems
