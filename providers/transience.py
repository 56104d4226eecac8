"""Is a pod's trouble the end of this `pulumi up`, or something the kubelet will get past?

Pure functions over the words the kubelet and the container runtime put into a pod's status and
events: a waiting state (reason + message), a termination (reason, exit code, termination message)
plus the container's log tail, and a restart count. Each returns a ``Verdict``:

- DEFINITIVE: retrying cannot help (the image is not in the registry, the credentials are refused,
  the name does not parse, the container is OOMKilled, the image has no passwd entry for our uid,
  the weights are not where the server reads them, a Secret the pod references is missing). The
  status fails at once, with the cause and what to do;
- TRANSIENT: the kubelet retries by itself and the next attempt may work (a registry timeout or
  5xx, one crash). The status keeps waiting, until the restart threshold (crashes) or the pending
  timeout (a pod that never starts), and only then fails, quoting the last cause.

Anything the tables do not recognise is TRANSIENT: an unknown cause is still bounded by the
threshold and the pending timeout, while calling it definitive would fail a rollout the kubelet
was about to finish. Network words are checked before registry answers: a message that says the
registry was never reached cannot also carry a verdict from it.

No I/O, no Pulumi: imported by pickled providers and by the tests directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

DEFINITIVE, TRANSIENT = "definitive", "transient"

# Restarts a crashing server container may make before the crash is the verdict. The kubelet's
# restart back-off is 10 s doubling to 5 min (pkg/kubelet/kubelet.go, MaxContainerBackOff), so 3
# restarts are reached ~70 s after the first crash: one flake recovers well inside it, a real
# crash loop is reported within about a minute and a half.
DEFAULT_RESTART_THRESHOLD = 3


@dataclass(frozen=True)
class Verdict:
    kind: str    # DEFINITIVE or TRANSIENT
    cause: str   # kebab-case, stable: shown as details.cause / the status reason
    hint: str    # what to do, in the user's terms

    @property
    def definitive(self) -> bool:
        return self.kind == DEFINITIVE


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    verdict: Verdict


def _rule(pattern: str, kind: str, cause: str, hint: str) -> _Rule:
    return _Rule(re.compile(pattern, re.I), Verdict(kind, cause, hint))


# --- waiting states ---------------------------------------------------------------------------
#
# Waiting reasons the kubelet sets on a container that has not started (kubernetes
# pkg/kubelet/images/types.go; pkg/kubelet/container/sync_result.go for the Create* ones;
# k8s.io/cri-api/pkg/errors for RegistryUnavailable / SignatureValidationFailed, which the kubelet
# maps in pkg/kubelet/images/image_manager.go evalCRIPullErr). Whatever the runtime answered is in
# the message of ErrImagePull (the CRI error text, verbatim). ImagePullBackOff's message is only
# `Back-off pulling image "<ref>"`: the cause of the last attempt is in the pod's `Failed` event,
# `Failed to pull image "<ref>": <CRI error>` (same file), so the events are classified too.
IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                           "ImageInspectError", "RegistryUnavailable", "SignatureValidationFailed"})
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})

_FIX_IMAGE = "fix the image reference (registry, repository, tag or digest)"
_FIX_CREDENTIALS = "give the pods registry credentials that may read it (imagePullSecrets) or fix them"

# By the reason alone: what the kubelet decided before any registry was asked.
_BY_REASON = {
    # The reference does not parse (applyDefaultImageTag failed).
    "InvalidImageName": Verdict(DEFINITIVE, "invalid-image-name", _FIX_IMAGE),
    # imagePullPolicy Never and the image is not on the node: nothing will put it there.
    "ErrImageNeverPull": Verdict(DEFINITIVE, "image-never-pulled",
                                 "pre-load the image on the GPU nodes or use imagePullPolicy IfNotPresent"),
    # A signature policy of the runtime refused the image: a new attempt gets the same answer.
    "SignatureValidationFailed": Verdict(DEFINITIVE, "image-signature-rejected",
                                         "use an image the node's signature policy accepts"),
    "RegistryUnavailable": Verdict(TRANSIENT, "registry-unavailable", "check the registry and the nodes' network"),
}

# Connection-level failures: the registry did not answer (containerd / CRI-O wrap Go's net and
# net/http errors: "dial tcp …: i/o timeout", "net/http: TLS handshake timeout", "context
# deadline exceeded", "connection reset by peer") or answered with a server error / rate limit
# ("unexpected status code 503 Service Unavailable", docker.io's "toomanyrequests"). Status codes
# are matched by their words only: a bare "503" can be part of the image's own tag.
_NETWORK = _rule(
    r"i/o timeout|TLS handshake timeout|context deadline exceeded|deadline exceeded|timed? ?out|"
    r"connection (reset|refused)|no route to host|network is unreachable|temporary failure|"
    r"server misbehaving|no such host|unexpected EOF|: EOF\b|"
    r"Internal Server Error|Bad Gateway|Service Unavailable|Gateway Time-?out|too ?many ?requests|rate limit",
    TRANSIENT, "registry-unreachable", "check the registry and the nodes' network; the kubelet retries")

# What a registry that did answer says. containerd: `failed to resolve reference "<ref>": <ref>:
# not found` (remotes/docker/resolver.go wraps errdefs.ErrNotFound), `pull access denied,
# repository does not exist or may require authorization: server message: insufficient_scope`,
# `failed to authorize: … 401 Unauthorized` / `403 Forbidden`; CRI-O (containers/image):
# `reading manifest <tag> in <repo>: manifest unknown`, `name unknown`, `requested access to the
# resource is denied`, `unauthorized: authentication required`; and CRI-O's short-name policy:
# `short name mode is enforcing, but image name … returns ambiguous list`.
_IMAGE_ANSWERS = (
    # Docker Hub answers a repository that does not exist as if it were private: the message
    # says both, so it is told apart from a plain "not found".
    _rule(r"pull access denied|repository does not exist or may require authorization",
          DEFINITIVE, "image-access-denied",
          f"the repository does not exist or needs credentials: {_FIX_IMAGE}, or {_FIX_CREDENTIALS}"),
    _rule(r"manifest unknown|name unknown|\bnot found\b|code = NotFound|no such image|does not exist",
          DEFINITIVE, "image-not-found", f"the registry has no such image: {_FIX_IMAGE}"),
    _rule(r"unauthorized|authentication required|forbidden|denied|insufficient_scope|no basic auth credentials",
          DEFINITIVE, "image-access-denied", _FIX_CREDENTIALS),
    _rule(r"short name mode is enforcing|ambiguous list|invalid reference format|repository name must",
          DEFINITIVE, "invalid-image-name", f"use a fully qualified image name; {_FIX_IMAGE}"),
)

# CreateContainerConfigError: the kubelet could not build the container's config from the pod
# spec (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables / kuberuntime): `secret "<name>" not
# found`, `couldn't find key <key> in Secret <ns>/<name>`, the same for ConfigMaps, and the
# runAsNonRoot checks (`container has runAsNonRoot and image will run as root`). It retries on
# every sync, but none of these changes until someone fixes the object or the spec.
_CONTAINER_CONFIG = (
    _rule(r"secret \S+ not found|couldn't find key \S+ in Secret",
          DEFINITIVE, "secret-missing", "create the Secret (and key) the model references, in the model's namespace"),
    _rule(r"configmap \S+ not found|couldn't find key \S+ in ConfigMap",
          DEFINITIVE, "configmap-missing", "create the ConfigMap (and key) the pod references"),
    _rule(r"runAsNonRoot|non-numeric user",
          DEFINITIVE, "non-root-check", "set a numeric non-root runAsUser the image accepts"),
    _rule(r"executable file not found|no such file or directory",
          DEFINITIVE, "entrypoint-missing", "the image lacks the command the pod runs: fix the image or its command"),
)


def _first(rules: Iterable[_Rule], text: str) -> Optional[Verdict]:
    for rule in rules:
        if rule.pattern.search(text):
            return rule.verdict
    return None


def classify_image_pull(reason: str, message: str, event_messages: Iterable[str] = ()) -> Verdict:
    """An image waiting state. ``event_messages``: the pod's recent event messages, newest last
    (the `Failed to pull image` ones carry the runtime's answer that ImagePullBackOff hides)."""
    if reason in _BY_REASON:
        return _BY_REASON[reason]
    texts = [message or ""] + [m for m in reversed(list(event_messages)) if "pull image" in (m or "")]
    for text in texts:
        if _NETWORK.pattern.search(text):
            return _NETWORK.verdict
        found = _first(_IMAGE_ANSWERS, text)
        if found:
            return found
    return Verdict(TRANSIENT, "image-pull-retrying", f"if it persists: {_FIX_IMAGE}, or {_FIX_CREDENTIALS}")


def classify_container_config(reason: str, message: str) -> Verdict:
    """CreateContainerConfigError / CreateContainerError / RunContainerError."""
    text = message or ""
    if _NETWORK.pattern.search(text):
        return Verdict(TRANSIENT, "container-create-retrying", "the runtime timed out; the kubelet retries")
    found = _first(_CONTAINER_CONFIG, text)
    if found:
        return found
    if reason == "CreateContainerConfigError":
        return Verdict(DEFINITIVE, "container-config", "fix what the message names in the pod's spec")
    return Verdict(TRANSIENT, "container-create-retrying", "if it persists, fix what the message names")


def classify_waiting(reason: str, message: str, event_messages: Iterable[str] = ()) -> Optional[Verdict]:
    """A waiting state that is trouble (image or container config), or None (ContainerCreating,
    PodInitializing, CrashLoopBackOff: the last is judged by ``classify_crash``)."""
    if reason in IMAGE_REASONS:
        return classify_image_pull(reason, message, event_messages)
    if reason in CONFIG_REASONS:
        return classify_container_config(reason, message)
    return None


# --- crashes ----------------------------------------------------------------------------------

# Crashes whose cause is in the log tail or the termination message (a container's last words,
# /dev/termination-log or, with FallbackToLogsOnError, the log tail the kubelet copies).
_CRASH_CAUSES = (
    # Python's getpass.getuser() -> pwd.getpwuid(os.getuid()) raises KeyError when the image's
    # /etc/passwd has no entry for the uid we run as (torch's inductor cache dir asks for it in
    # vLLM; NIM's entrypoint too): the same on every restart.
    _rule(r"getpwuid|uid not found", DEFINITIVE, "uid-unknown",
          "the server crashes because its uid has no passwd entry in the image; use the engine's uid "
          "(vLLM 2000/0, NIM 1000/2000)"),
    # source.load: stream — the server reads the store itself (vLLM v0.11.0 with the Run:ai
    # streamer; the texts are the ones tests/streamer sees from the real library and boto3). The
    # store refused the request or has no such bucket: the same on every restart.
    _rule(r"SignatureDoesNotMatch|InvalidAccessKeyId|AccessDenied|NoSuchBucket|Unable to locate credentials|"
          r"NoCredentialsError|InvalidToken|ExpiredToken",
          DEFINITIVE, "object-store-refused",
          "the server streams its weights from the object store, which refused it or has no such bucket; "
          "fix source.bucket, source.endpoint or the keys in the source.credentials Secret (or the cloud "
          "identity of source.serviceAccountName)"),
    # The streamer's buffer is smaller than the model's largest tensor (runai-model-streamer
    # RunaiStreamerMemoryLimitException; tests/streamer renders such a limit and sees it).
    _rule(r"Memory limit supplied: \d+ cannot be smaller than", DEFINITIVE, "stream-buffer-too-small",
          "the streamer's buffer is smaller than the model's largest tensor; raise source.streamMemoryLimit "
          "(and resources.memory with it)"),
    # The store did not answer (down, a NetworkPolicy, DNS): it may come back.
    _rule(r"EndpointConnectionError|Could not connect to the endpoint URL|ConnectTimeoutError",
          TRANSIENT, "object-store-unreachable",
          "the server streams its weights from the object store and cannot reach it; check source.endpoint "
          "and that the server pods may connect to the store"),
    # Nothing under the prefix: vLLM copied no config.json into its model_streamer folder
    # (vllm/transformers_utils/config.py then names that folder), or found no *.safetensors there
    # (vllm/model_executor/model_loader/runai_streamer_loader.py, v0.11.0).
    _rule(r"Invalid repository ID or local directory specified: '[^']*/model_streamer/|"
          r"Cannot find any safetensors model weights with",
          DEFINITIVE, "object-store-empty",
          "the server streams its weights from the object store and found no config.json or no "
          "*.safetensors under the source's bucket and prefix; fix source.prefix (preview lists it)"),
    # The weights are not at the path the server reads: vLLM's get_config raises "Invalid
    # repository ID or local directory specified" when the model directory has no config.json
    # (vllm-project/vllm, vllm/transformers_utils/config.py, 0.11), its default loader "Cannot
    # find any model weights with <path>" (vllm/model_executor/model_loader/default_loader.py),
    # transformers "does not appear to have a file named config.json"; with HF_HUB_OFFLINE=1 a
    # missing file is also reported as "outgoing traffic has been disabled" / LocalEntryNotFoundError.
    _rule(r"Invalid repository ID or local directory|Cannot find any model weights|"
          r"does not appear to have a file named|LocalEntryNotFoundError|outgoing traffic has been disabled",
          DEFINITIVE, "weights-missing",
          "the server finds no weights at its model path; check that the puller completed on this "
          "volume (`pulumi refresh` then `pulumi up` re-pulls a lost volume) and source.repo"),
    # A model larger than the GPUs: deterministic for a given model, GPU count and max-model-len.
    _rule(r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError", DEFINITIVE, "gpu-out-of-memory",
          "the model does not fit the GPUs; add gpus / tensorParallelSize or lower --max-model-len"),
    # NCCL's "unhandled system error" also covers network flukes between ranks: a restart may
    # recover, so it names the likely fix only once the threshold is reached.
    _rule(r"NCCL|/dev/shm|shared memory|Bus error", TRANSIENT, "shared-memory",
          "the server crashes on shared memory / NCCL; raise sharedMemorySizeLimit"),
)

OOM_KILLED = Verdict(DEFINITIVE, "oom-killed", "raise resources.memory")
_CRASH = Verdict(TRANSIENT, "crash-loop", "read the log tail; fix the server's args, env or image")


def classify_crash(terminated: dict, log_tail: str = "") -> Verdict:
    """A container's last termination (``lastState.terminated`` or ``state.terminated``) and the
    log tail of the pod. OOMKilled is the kernel's cgroup verdict on the memory limit: the same
    load meets the same limit on the next start."""
    if (terminated or {}).get("reason") == "OOMKilled":
        return OOM_KILLED
    text = "\n".join(t for t in ((terminated or {}).get("message") or "", log_tail or "") if t)
    return _first(_CRASH_CAUSES, text) or _CRASH


def crash_is_fatal(verdict: Verdict, restarts: int, threshold: int = DEFAULT_RESTART_THRESHOLD) -> bool:
    """A definitive crash fails at once; a transient one once the container has restarted
    ``threshold`` times (at least once: a threshold below 1 is read as 1)."""
    return verdict.definitive or restarts >= max(1, int(threshold))


def definitive_waiting(pod: dict, event_messages: Iterable[str] = ()) -> Optional[tuple[dict, Verdict]]:
    """The first container of a pod (wire-shape dict) waiting on a DEFINITIVE image or config
    cause, with its verdict; None when every wait may still end by itself."""
    status = pod.get("status") or {}
    events = list(event_messages)
    for container in list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or []):
        waiting = (container.get("state") or {}).get("waiting") or {}
        verdict = classify_waiting(waiting.get("reason") or "", waiting.get("message") or "", events)
        if verdict is not None and verdict.definitive:
            return {"container": container.get("name"), "image": container.get("image"), **waiting}, verdict
    return None
