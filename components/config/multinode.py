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

What a multi-node model cannot be, given its other settings, is checked in ``model.py``
(``multinode_problems``).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from .types import Strict

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
