"""A multi-node model's server: a LeaderWorkerSet (``multiNode``) instead of the Deployment.

One group per replica; each group is a leader pod and ``nodes - 1`` workers, one per node, each
taking the model's ``gpus``. The pod template is the one-pod server's (``server.py``: identity,
security, volumes, scheduling, drain), with the command per role:

- ``ray``: the leader starts the Ray head, waits until every pod of its group has joined
  (``LWS_GROUP_SIZE`` nodes), then runs ``vllm serve --distributed-executor-backend ray`` with
  tensor parallel inside a node and pipeline parallel across nodes. A worker waits for the head,
  then runs ``ray start --address $LWS_LEADER_ADDRESS:<port> --block``.
- ``dataParallel``: every pod runs ``vllm serve`` with ``--data-parallel-size`` (all ranks),
  ``--data-parallel-size-local`` (its node's), ``--data-parallel-address $(LWS_LEADER_ADDRESS)``
  and ``--data-parallel-rpc-port``; a worker adds ``--headless`` (no API server) and its first
  rank, ``--data-parallel-start-rank`` = ``LWS_WORKER_INDEX × local ranks``.

The LWS pod webhook injects ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``
into every container (sigs.k8s.io/lws v0.8.0 pkg/utils/pod AddLWSVariables). Every vLLM option
used here is in vLLM 0.11's parser (tests/fixtures/vllm_0_11_0.py, tests/unit/test_multinode.py).

Only the leader serves HTTP: it keeps the probes and the ``http`` port, and the Service selects it
alone (worker-index ``0``). Workers have no probe: a worker is ready while it runs, and the
leader's ``/health`` answers only once the engine, which spans the whole group, is up.
"""

from __future__ import annotations

import copy

from contract.labels import LWS_GROUP, LWS_GROUP_KEY_LABEL, LWS_VERSION, LWS_WORKER_INDEX_LABEL

from ..config.model import ModelConfig
from ..config.multinode import DATA_PARALLEL_RPC_PORT, RAY_PORT
from ..config.stack import StackConfig
from . import common, engines, server

API_VERSION = f"{LWS_GROUP}/{LWS_VERSION}"
KIND = "LeaderWorkerSet"

# sh -c scripts; "$@" is vLLM's arguments.
# Python run on the leader: the Ray nodes alive in the group's cluster.
RAY_NODES_PY = 'import ray; ray.init(address="auto", logging_level="ERROR"); print(sum(1 for n in ray.nodes() if n["Alive"]))'
RAY_LEADER_SH = f"""set -eu
ray start --head --port={RAY_PORT} --disable-usage-stats
until [ "$(python3 -c '{RAY_NODES_PY}')" -ge "$LWS_GROUP_SIZE" ]; do
  echo "waiting for the group's $LWS_GROUP_SIZE Ray nodes"; sleep 5
done
exec vllm serve "$@"
"""
RAY_WORKER_SH = f"""set -eu
until ray status --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" >/dev/null 2>&1; do
  echo "waiting for the Ray head on $LWS_LEADER_ADDRESS:{RAY_PORT}"; sleep 5
done
exec ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" --block --disable-usage-stats
"""


def dp_worker_sh(local_ranks: int) -> str:
    return f'exec vllm serve "$@" --headless --data-parallel-start-rank "$((LWS_WORKER_INDEX * {local_ranks}))"\n'


def local_ranks(model: ModelConfig) -> int:
    """dataParallel: the data-parallel ranks one pod runs (its GPUs over the tensor-parallel degree)."""
    return model.gpus // model.tensor_parallel_size


def vllm_args(model: ModelConfig) -> list[str]:
    """The group's shared `vllm serve` arguments (the one-pod server's, plus the mode's)."""
    spec = model.multi_node
    assert spec is not None
    args = list(engines.server_command(model)["args"])
    if spec.ray:
        return args + ["--distributed-executor-backend", "ray",
                       "--pipeline-parallel-size", str(spec.pipeline_size())]
    local = local_ranks(model)
    args += ["--data-parallel-size", str(spec.nodes * local), "--data-parallel-size-local", str(local),
             "--data-parallel-address", "$(LWS_LEADER_ADDRESS)",
             "--data-parallel-rpc-port", str(DATA_PARALLEL_RPC_PORT)]
    return args + (["--enable-expert-parallel"] if spec.expert_parallel else [])


def _role_template(template: dict, command: list[str], args: list[str], leader: bool) -> dict:
    result = copy.deepcopy(template)
    container = result["spec"]["containers"][0]
    container["command"], container["args"] = command, args
    if not leader:
        for key in ("startupProbe", "readinessProbe", "livenessProbe", "ports"):
            container.pop(key, None)
        # The router's pylon sidecar fronts the leader only (the pod the Service selects).
        pod = result["spec"]
        pod["containers"] = [container]
        mounted = {m["name"] for m in container.get("volumeMounts", [])}
        pod["volumes"] = [v for v in pod.get("volumes", []) if v["name"] in mounted]
    return result


def one_pod_per_node(model: ModelConfig) -> dict:
    """Required pod anti-affinity: no two pods of the same group on one node (``matchLabelKeys``
    takes the group's own key, set on each pod by the LWS webhook), so a group spans ``nodes``
    nodes as promised; pods of different groups may share a node."""
    return {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": common.selector_labels(model, server.SERVER_COMPONENT)},
        "matchLabelKeys": [LWS_GROUP_KEY_LABEL],
        "topologyKey": "kubernetes.io/hostname",
    }]}


def templates(model: ModelConfig, template: dict) -> tuple[dict, dict]:
    """(leader template, worker template) from the one-pod server's pod template."""
    spec = model.multi_node
    assert spec is not None
    template = copy.deepcopy(template)
    affinity = template["spec"].setdefault("affinity", {})
    affinity["podAntiAffinity"] = {**affinity.get("podAntiAffinity", {}), **one_pod_per_node(model)}
    args = vllm_args(model)
    if spec.ray:
        leader = _role_template(template, ["sh", "-c", RAY_LEADER_SH, "ray-leader"], args, leader=True)
        worker = _role_template(template, ["sh", "-c", RAY_WORKER_SH, "ray-worker"], [], leader=False)
    else:
        leader = _role_template(template, ["vllm", "serve"], args, leader=True)
        worker = _role_template(template, ["sh", "-c", dp_worker_sh(local_ranks(model)), "dp-worker"], args,
                                leader=False)
    return leader, worker


def compile_leader_worker_set(model: ModelConfig, stack: StackConfig) -> dict:
    spec = model.multi_node
    assert spec is not None
    deployment = server.compile_server_deployment(model, stack)
    leader, worker = templates(model, deployment["spec"]["template"])
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": deployment["metadata"],  # named <model>-lws (common.ModelNames)
        "spec": {
            "replicas": model.replicas,
            # Pods of a group are created at once (the leader need not be ready first: its
            # readiness needs the workers).
            "startupPolicy": "LeaderCreated",
            # Never surge: a surge group needs `nodes × gpus` GPUs the cluster may not have; one
            # group at a time is replaced instead.
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "leaderWorkerTemplate": {
                "size": spec.nodes,
                # A failed or deleted pod takes its group down and back up whole: the engine spans
                # the group and cannot take one rank back.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }


def compile_leader_service(model: ModelConfig, stack: StackConfig) -> dict:
    """The model's Service, selecting only the groups' leaders (the pods that serve HTTP)."""
    service = server.compile_service(model, stack.platform)
    service["spec"]["selector"] = {**service["spec"]["selector"], LWS_WORKER_INDEX_LABEL: "0"}
    return service

