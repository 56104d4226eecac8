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
  rank, ``--data-parallel-start-rank`` = ``LWS_WORKER_INDEX × local ranks``. Both lines read this
  the same way: the leader (no start rank) balances over every rank itself (internal load
  balancing), and a start rank only with ``--headless`` (0.32 takes a start rank without it as
  hybrid load balancing: ``EngineArgs.create_engine_config``). On 0.32 the leader starts one API
  server per rank by default (``--api-server-count`` follows the data-parallel size); runtime
  LoRA updating would refuse that, but multi-node models take no LoRA (config/multinode.py).

The LWS pod webhook injects ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``
into every container (sigs.k8s.io/lws v0.8.0 pkg/utils/pod AddLWSVariables). Every vLLM option
used here is in each line's parser (components/config/vllm_lines/, tests/compile/test_multinode.py).

Weights (``multiNode.weights``): ``shared`` mounts the one ReadWriteMany volume the puller Job
filled (behind the weights gate). ``perPod``: the LeaderWorkerSet's ``volumeClaimTemplates`` give
every pod a volume of its own (``per_pod_weights``); init containers built by the puller Job's own
builders (``weights.PULLERS``: the hub CLI, rclone and the verify step) pull into a directory named after
the source's identity hash and verify it, then old revisions' directories are pruned; the server
mounts that directory only, so it cannot start on anything unverified.

Only the leader serves HTTP: it keeps the probes and the ``http`` port, and the Service selects it
alone (worker-index ``0``). Workers have no probe: a worker is ready while it runs, and the
leader's ``/health`` answers only once the engine, which spans the whole group, is up.
"""

from __future__ import annotations

import copy

from contract.labels import (
    LWS_GROUP,
    LWS_GROUP_KEY_LABEL,
    LWS_VERSION,
    LWS_WORKER_INDEX_LABEL,
    WEIGHTS_PRUNE_INIT,
    WEIGHTS_PULL_INIT,
    WEIGHTS_VERIFY_INIT,
)

from ..config.model import ModelConfig
from ..config.multinode import DATA_PARALLEL_RPC_PORT, RAY_PORT
from ..config.stack import StackConfig
from . import common, engines, server, weights

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


# --- per-pod weights (multiNode.weights: perPod) -------------------------------------------------

# The claim template's name: the pods' volume `weights`; the StatefulSet controller names each pod's
# claim `weights-<pod>` (`<claim>-<statefulset>-<ordinal>`: the leaders' StatefulSet is the LWS's name,
# a group's workers' is `<lws>-<group>`).
WEIGHTS_VOLUME = "weights"
# The whole volume, mounted by the prune step only (the others see the revision directory).
VOLUME_ROOT_MOUNT = "/weights-volume"
# Init containers, in order; contract: the status projection (providers/pod_weights.py) reads them.
PULL_INIT, VERIFY_INIT, PRUNE_INIT = WEIGHTS_PULL_INIT, WEIGHTS_VERIFY_INIT, WEIGHTS_PRUNE_INIT
# The claims follow the LWS: destroy and a lower replica count delete them (they are ours; a kept
# node-local claim would also pin a recreated pod to its node).
RETENTION = {"whenDeleted": "Delete", "whenScaled": "Delete"}

# $1: the volume's root, $2: this revision's directory. Removes every other revision once this one
# has verified (the init containers before it succeeded). Best effort: the verified copy serves
# even if a removal fails (the next pull then reports a full volume). lost+found (ext4) is the
# filesystem's.
PRUNE_SCRIPT = r"""set -u
cd "$1" || exit 0
for entry in * .[!.]*; do
  [ -e "$entry" ] || continue
  case "$entry" in "$2"|lost+found) continue ;; esac
  if rm -rf "./$entry"; then echo "llm-serving: pruned old weights $entry"
  else echo "llm-serving: could not prune $entry" >&2; fi
done
exit 0
"""


def revision_dir(model: ModelConfig) -> str:
    """The directory of this source's weights inside a per-pod volume (the source's identity hash,
    as in the shared volume's name): a new revision never writes into the copy a pod serves from."""
    return common.source_hash(model)


def per_pod(model: ModelConfig) -> bool:
    return model.multi_node is not None and model.multi_node.per_pod


def _in_revision(container: dict, model: ModelConfig) -> dict:
    """The builder's container with its weights mount narrowed to this revision's directory."""
    result = copy.deepcopy(container)
    for mount in result.get("volumeMounts", []):
        if mount["name"] == WEIGHTS_VOLUME:
            mount["subPath"] = revision_dir(model)
    # Its last lines become the termination message the status reports.
    result.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    return result


def weights_init_containers(model: ModelConfig, stack: StackConfig) -> list[dict]:
    """Pull, verify (the puller Job's own containers, same commands and checks), then prune."""
    platform = stack.platform
    ident = common.identity(model, platform)
    init, main = weights.PULLERS[model.source.type].pod_steps(model, platform, ident, common.tmp_volume()[1])
    steps = [*init, *main]
    renamed = [PULL_INIT, VERIFY_INIT] if len(steps) == 2 else [PULL_INIT]
    containers = [{**_in_revision(c, model), "name": name} for c, name in zip(steps, renamed, strict=True)]
    prune = {
        "name": PRUNE_INIT,
        "image": steps[0]["image"],  # the puller's image has sh, rm and the same uid
        "command": ["sh", "-c", PRUNE_SCRIPT, "prune"],
        "args": [VOLUME_ROOT_MOUNT, revision_dir(model)],
        "volumeMounts": [{"name": WEIGHTS_VOLUME, "mountPath": VOLUME_ROOT_MOUNT}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": common.container_security_context(ident, read_only_root=True),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return [*containers, prune]


def _with_pod_weights(template: dict, model: ModelConfig, init: list[dict], ident: common.Identity) -> dict:
    """A role's template with its own volume: the init containers first, the server's weights mount
    on the revision directory, no `weights` volume (the claim template's), fsGroup so the pull can
    write a fresh volume (OnRootMismatch: no recursive chown on every start)."""
    result = copy.deepcopy(template)
    pod = result["spec"]
    for container in pod["containers"]:
        for mount in container.get("volumeMounts", []):
            if mount["name"] == WEIGHTS_VOLUME:
                mount["subPath"] = revision_dir(model)
    pod["volumes"] = [v for v in pod.get("volumes", []) if v["name"] != WEIGHTS_VOLUME]
    tmp = common.tmp_volume()[0]
    if not any(v["name"] == tmp["name"] for v in pod["volumes"]):
        pod["volumes"].append(tmp)
    pod["initContainers"] = [*copy.deepcopy(init), *pod.get("initContainers", [])]
    pod["securityContext"] = {**pod["securityContext"], "fsGroup": ident.gid, "fsGroupChangePolicy": "OnRootMismatch"}
    return result


def weights_claim_template(model: ModelConfig, stack: StackConfig) -> dict:
    spec: dict = {"accessModes": [model.weights.access_mode],
                  "resources": {"requests": {"storage": model.weights.size}}}
    storage_class = model.weights.storage_class_name or stack.platform.storage_class_name
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": WEIGHTS_VOLUME}, "spec": spec}


def compile_leader_worker_set(model: ModelConfig, stack: StackConfig) -> dict:
    spec = model.multi_node
    assert spec is not None
    deployment = server.compile_server_deployment(model, stack)
    leader, worker = templates(model, deployment["spec"]["template"])
    claims: dict = {}
    if spec.per_pod:
        init = weights_init_containers(model, stack)
        ident = common.identity(model, stack.platform)
        leader, worker = (_with_pod_weights(t, model, init, ident) for t in (leader, worker))
        claims = {"volumeClaimTemplates": [weights_claim_template(model, stack)],
                  "persistentVolumeClaimRetentionPolicy": dict(RETENTION)}
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
                **claims,
            },
        },
    }


def compile_leader_service(model: ModelConfig, stack: StackConfig) -> dict:
    """The model's Service, selecting only the groups' leaders (the pods that serve HTTP)."""
    service = server.compile_service(model, stack.platform)
    service["spec"]["selector"] = {**service["spec"]["selector"], LWS_WORKER_INDEX_LABEL: "0"}
    return service

