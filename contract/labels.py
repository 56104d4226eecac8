"""Label keys and API names the compilers write and the providers read, so the two cannot drift
apart. Pure constants, no imports: the pickled providers import this module."""

from __future__ import annotations

# --- labels ---------------------------------------------------------------------------------
COMPONENT_LABEL = "app.kubernetes.io/component"
DOMAIN = "llm-serving.dev"
MODEL_LABEL = f"{DOMAIN}/model"
ENGINE_LABEL = f"{DOMAIN}/engine"
# On a next revision's objects (models[].next): the model it is the next revision of, whose
# weights (and their gate) it may use.
REVISION_OF_LABEL = f"{DOMAIN}/revision-of"
# On a CPU model's objects (`gpus: 0`, vLLM's CPU server): `cpu`. GPU models carry none: a label
# added to their pod templates would restart every deployed GPU server. The policy pack tells the
# two kinds of server apart by it.
DEVICE_LABEL = f"{DOMAIN}/device"
CPU_DEVICE = "cpu"

# Values of COMPONENT_LABEL on a model's pods: what the status projection tells apart.
SERVER_COMPONENT = "server"

# --- the k8s-nim-operator's API (apps.nvidia.com/v1alpha1, k8s-nim-operator api/apps/v1alpha1) --
NIM_GROUP = "apps.nvidia.com"
NIM_VERSION = "v1alpha1"
NIM_CACHE_PLURAL, NIM_SERVICE_PLURAL = "nimcaches", "nimservices"
# What the operator path needs on the cluster; a vLLM-only (or raw-path) stack needs neither.
NIM_CRD_NAMES = (f"{NIM_CACHE_PLURAL}.{NIM_GROUP}", f"{NIM_SERVICE_PLURAL}.{NIM_GROUP}")
# The operator selects the pods of a NIMService by this label (value: the NIMService's name).
NIM_POD_SELECTOR_LABEL = "app"
# A multi-node NIMService's LeaderWorkerSet is `<name>-lws` (k8s-nim-operator v3.1.2, GetLWSName).
NIM_LWS_SUFFIX = "-lws"

# --- LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, sigs.k8s.io/lws v0.8.0 api/leaderworkerset/v1) --
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_VERSION = "v1"
LWS_PLURAL = "leaderworkersets"
LWS_CRD_NAME = f"{LWS_PLURAL}.{LWS_GROUP}"
# Labels the LWS controller and its pod webhook put on every group pod.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" on the leader
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"  # unique per group (the pod webhook sets it)
# The event the LWS controller records on the LeaderWorkerSet when it recreates a group.
LWS_RECREATE_EVENT = "RecreateGroupOnPodRestart"

# --- per-pod weights of a multi-node model (multiNode.weights: perPod) ------------------------
# The init containers of every group pod, in order (components/compile/multinode.py renders them,
# providers/pod_weights.py reports them): pull into the pod's own volume, verify it, prune old
# revisions.
WEIGHTS_PULL_INIT, WEIGHTS_VERIFY_INIT, WEIGHTS_PRUNE_INIT = "weights-pull", "weights-verify", "weights-prune"
