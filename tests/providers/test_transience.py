"""providers/transience.py: which pod troubles end `pulumi up` at once and which are waited out.

Table-driven over the words kubelets and runtimes really write (containerd 1.7 / 2.x, CRI-O with
containers/image, the kubelet's own messages from kubernetes pkg/kubelet/images/image_manager.go),
each with the verdict and the cause it must get.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import providers.observe as observe_module
from contract.props import GateProps
from providers import gate
from providers.gate import WeightsNotReady
from providers.nim_status import NimModelNotServing
from providers.projection import READY, Observation, lagging_replica
from providers.status import ModelNotServing
from providers.status import wait_until_serving as nim_wait
from providers.transience import (
    DEFAULT_RESTART_THRESHOLD,
    DEFINITIVE,
    TRANSIENT,
    classify_crash,
    classify_image_pull,
    classify_waiting,
    crash_is_fatal,
)
from tests.support.fakes import (
    NOW,
    NS,
    PULLER_JOB,
    SERVER,
    STATUS_PROPS,
    FakeClock,
    FakeCluster,
    container_status,
    deployment,
    event,
    job,
    pod,
    ready_server_pod,
    ready_slices,
    wait_serving,
)

REF = "docker.io/vllm/vllm-openai:v0.11.0"
RESOLVE = f'failed to pull and unpack image "{REF}": failed to resolve reference "{REF}": '

# (id, waiting reason, message, event messages, expected kind, expected cause)
WAITING = [
    # --- definitive: the registry answered, or nothing was asked ---------------------------------
    ("containerd-tag-not-found", "ErrImagePull",
     f"rpc error: code = NotFound desc = {RESOLVE}{REF}: not found", (), DEFINITIVE, "image-not-found"),
    ("crio-manifest-unknown", "ErrImagePull",
     "reading manifest v0.99 in docker.io/vllm/vllm-openai: manifest unknown: manifest unknown", (),
     DEFINITIVE, "image-not-found"),
    ("ghcr-name-unknown", "ErrImagePull",
     'failed to pull and unpack image "ghcr.io/acme/nope:1": failed to resolve reference "ghcr.io/acme/nope:1": '
     "name unknown: repository name not known to registry", (), DEFINITIVE, "image-not-found"),
    ("dockerhub-repo-missing-or-private", "ErrImagePull",
     f"{RESOLVE}pull access denied, repository does not exist or may require authorization: server message: "
     "insufficient_scope: authorization failed", (), DEFINITIVE, "image-access-denied"),
    ("ngc-401", "ErrImagePull",
     'failed to pull and unpack image "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3": failed to resolve reference '
     '"nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3": failed to authorize: failed to fetch oauth token: unexpected '
     "status from GET request to https://nvcr.io/proxy_auth?scope=repository: 401 Unauthorized", (),
     DEFINITIVE, "image-access-denied"),
    ("ecr-403", "ErrImagePull",
     "rpc error: code = Unknown desc = failed to pull and unpack image: failed to resolve reference: "
     "unexpected status code 403 Forbidden", (), DEFINITIVE, "image-access-denied"),
    ("crio-denied", "ErrImagePull",
     "initializing source docker://quay.io/acme/private:1: reading manifest 1 in quay.io/acme/private: "
     "unauthorized: access to the requested resource is not authorized", (), DEFINITIVE, "image-access-denied"),
    ("crio-short-name", "ErrImagePull",
     'short name mode is enforcing, but image name vllm-openai:latest returns ambiguous list', (),
     DEFINITIVE, "invalid-image-name"),
    ("invalid-image-name", "InvalidImageName",
     'Failed to apply default image tag "docker.io/vllm/VLLM:x": couldn\'t parse image name', (),
     DEFINITIVE, "invalid-image-name"),
    ("never-pull", "ErrImageNeverPull",
     f'Container image "{REF}" is not present with pull policy of Never', (), DEFINITIVE, "image-never-pulled"),
    ("signature", "SignatureValidationFailed",
     f"image pull failed for {REF} because the signature validation failed: no signature", (),
     DEFINITIVE, "image-signature-rejected"),
    # ImagePullBackOff hides the cause; the kubelet's Failed event still has it.
    ("backoff-with-not-found-event", "ImagePullBackOff", f'Back-off pulling image "{REF}"',
     (f'Pulling image "{REF}"', f'Failed to pull image "{REF}": {RESOLVE}{REF}: not found', "Error: ErrImagePull"),
     DEFINITIVE, "image-not-found"),
    ("missing-secret", "CreateContainerConfigError", 'secret "llama-hf-token" not found', (),
     DEFINITIVE, "secret-missing"),
    ("missing-secret-key", "CreateContainerConfigError",
     "couldn't find key HF_TOKEN in Secret llm/llama-hf-token", (), DEFINITIVE, "secret-missing"),
    ("run-as-non-root", "CreateContainerConfigError",
     "container has runAsNonRoot and image has non-numeric user (vllm), cannot verify user is non-root", (),
     DEFINITIVE, "non-root-check"),
    ("config-error-unknown-words", "CreateContainerConfigError", "something the tables do not know", (),
     DEFINITIVE, "container-config"),
    # --- transient: the registry was not reached, or answered "later" ----------------------------
    ("dial-io-timeout", "ErrImagePull",
     f'{RESOLVE}failed to do request: Head "https://registry-1.docker.io/v2/vllm/vllm-openai/manifests/v0.11.0": '
     "dial tcp 104.16.0.1:443: i/o timeout", (), TRANSIENT, "registry-unreachable"),
    ("tls-handshake-timeout", "ErrImagePull",
     f'{RESOLVE}failed to do request: Head "https://nvcr.io/v2/": net/http: TLS handshake timeout', (),
     TRANSIENT, "registry-unreachable"),
    ("context-deadline", "ErrImagePull",
     "rpc error: code = DeadlineExceeded desc = context deadline exceeded", (), TRANSIENT, "registry-unreachable"),
    ("registry-503", "ErrImagePull",
     f"{RESOLVE}unexpected status from HEAD request to https://nvcr.io/v2/nim/manifests/1: 503 Service Unavailable",
     (), TRANSIENT, "registry-unreachable"),
    ("registry-502-blob", "ErrImagePull",
     "failed to copy: httpReadSeeker: failed open: unexpected status code https://registry/v2/x/blobs/sha256:ab: "
     "502 Bad Gateway", (), TRANSIENT, "registry-unreachable"),
    ("dockerhub-rate-limit", "ErrImagePull",
     f"{RESOLVE}unexpected status code 429 Too Many Requests - Server message: toomanyrequests: You have reached your "
     "pull rate limit", (), TRANSIENT, "registry-unreachable"),
    ("connection-reset", "ErrImagePull",
     "failed to copy: read tcp 10.0.0.5:51234->104.16.0.1:443: read: connection reset by peer", (),
     TRANSIENT, "registry-unreachable"),
    ("registry-unavailable", "RegistryUnavailable",
     f"image pull failed for {REF} because the registry is unavailable", (), TRANSIENT, "registry-unavailable"),
    ("backoff-with-timeout-event", "ImagePullBackOff", f'Back-off pulling image "{REF}"',
     (f'Failed to pull image "{REF}": {RESOLVE}dial tcp 104.16.0.1:443: i/o timeout',), TRANSIENT,
     "registry-unreachable"),
    ("backoff-without-evidence", "ImagePullBackOff", f'Back-off pulling image "{REF}"', (),
     TRANSIENT, "image-pull-retrying"),
    # A 503 in the image's own tag is no server error, and no verdict either.
    ("status-code-like-tag", "ImagePullBackOff", 'Back-off pulling image "registry.example.com/m:v0.503"', (),
     TRANSIENT, "image-pull-retrying"),
    ("create-container-timeout", "CreateContainerError", "context deadline exceeded", (),
     TRANSIENT, "container-create-retrying"),
    # The newest Failed event decides: the registry recovered from its timeout and now says "not found".
    ("newest-event-wins", "ImagePullBackOff", f'Back-off pulling image "{REF}"',
     (f'Failed to pull image "{REF}": dial tcp: i/o timeout', f'Failed to pull image "{REF}": {RESOLVE}{REF}: not found'),
     DEFINITIVE, "image-not-found"),
]


@pytest.mark.parametrize("reason, message, events, kind, cause", [w[1:] for w in WAITING], ids=[w[0] for w in WAITING])
def test_waiting_states(reason: str, message: str, events: tuple, kind: str, cause: str) -> None:
    verdict = classify_waiting(reason, message, events)
    assert verdict is not None
    assert (verdict.kind, verdict.cause) == (kind, cause), verdict
    assert verdict.hint  # every verdict says what to do


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing", "CrashLoopBackOff", ""])
def test_ordinary_waiting_is_no_trouble(reason: str) -> None:
    assert classify_waiting(reason, "back-off 10s restarting failed container") is None


def test_events_that_are_not_pull_failures_are_ignored() -> None:
    """A BackOff event about a crashing container says nothing about the image."""
    verdict = classify_image_pull("ImagePullBackOff", f'Back-off pulling image "{REF}"',
                                  ["Back-off restarting failed container server: not found"])
    assert verdict.kind == TRANSIENT


UID_TAIL = "  File \"/usr/lib/python3.12/getpass.py\", line 169, in getuser\nKeyError: 'getpwuid(): uid not found: 1001'"

# (id, terminated, log tail, kind, cause)
CRASHES = [
    ("oom-killed", {"reason": "OOMKilled", "exitCode": 137}, "", DEFINITIVE, "oom-killed"),
    ("oom-killed-wins-over-the-log", {"reason": "OOMKilled", "exitCode": 137}, UID_TAIL, DEFINITIVE, "oom-killed"),
    ("uid-in-the-log", {"reason": "Error", "exitCode": 1}, UID_TAIL, DEFINITIVE, "uid-unknown"),
    ("uid-in-the-termination-message", {"reason": "Error", "exitCode": 1,
                                        "message": "KeyError: 'getpwuid(): uid not found: 1000'"}, "",
     DEFINITIVE, "uid-unknown"),
    ("vllm-no-config-json", {"reason": "Error", "exitCode": 1},
     "ValueError: Invalid repository ID or local directory specified: '/model-store/weights'.", DEFINITIVE,
     "weights-missing"),
    ("vllm-no-weight-files", {"reason": "Error", "exitCode": 1},
     "RuntimeError: Cannot find any model weights with `/model-store/weights`", DEFINITIVE, "weights-missing"),
    ("offline-hub-lookup", {"reason": "Error", "exitCode": 1},
     "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder", DEFINITIVE,
     "weights-missing"),
    ("cuda-oom", {"reason": "Error", "exitCode": 1},
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", DEFINITIVE, "gpu-out-of-memory"),
    ("nccl-may-be-a-fluke", {"reason": "Error", "exitCode": 1},
     "torch.distributed.DistBackendError: NCCL error: unhandled system error", TRANSIENT, "shared-memory"),
    ("unknown-crash", {"reason": "Error", "exitCode": 1},
     "RuntimeError: Engine core initialization failed. See root cause above.", TRANSIENT, "crash-loop"),
    ("killed-by-a-probe", {"reason": "Error", "exitCode": 137}, "", TRANSIENT, "crash-loop"),
]


@pytest.mark.parametrize("terminated, tail, kind, cause", [c[1:] for c in CRASHES], ids=[c[0] for c in CRASHES])
def test_crashes(terminated: dict, tail: str, kind: str, cause: str) -> None:
    verdict = classify_crash(terminated, tail)
    assert (verdict.kind, verdict.cause) == (kind, cause), verdict


@pytest.mark.parametrize("restarts, fatal", [(0, False), (1, False), (DEFAULT_RESTART_THRESHOLD - 1, False),
                                             (DEFAULT_RESTART_THRESHOLD, True), (9, True)])
def test_a_transient_crash_is_fatal_at_the_threshold(restarts: int, fatal: bool) -> None:
    assert crash_is_fatal(classify_crash({"reason": "Error", "exitCode": 1}), restarts) is fatal


def test_a_definitive_crash_is_fatal_at_once() -> None:
    assert crash_is_fatal(classify_crash({"reason": "OOMKilled", "exitCode": 137}), 0)
    assert crash_is_fatal(classify_crash({"reason": "Error"}, UID_TAIL), 1, threshold=10)


@pytest.mark.parametrize("threshold, restarts, fatal", [(5, 4, False), (5, 5, True), (1, 1, True), (0, 1, True),
                                                        (0, 0, False)])
def test_the_threshold_is_configurable_and_at_least_one(threshold: int, restarts: int, fatal: bool) -> None:
    assert crash_is_fatal(classify_crash({"reason": "Error", "exitCode": 1}), restarts, threshold) is fatal


# --- the wait loop (providers/status.py) with the in-memory API and a simulated clock --------------


# A poll every 2 s and the default 30-minute ready timeout: the fail-fast bounds are measured on them.
PROPS = {**STATUS_PROPS, "ready_timeout_seconds": 1800, "poll_seconds": 2}
FAIL_FAST = 30  # issue 15 item 7: a definitive cause fails `up` within 30 s


def now() -> datetime:
    return datetime.now(UTC)  # pending ages are read against the wall clock


def waiting_pod(waiting: dict, *, age: float = 5, restarts: int = 0) -> dict:
    return pod(SERVER, phase="Pending", age=age, now=now(),
               containers=[container_status(waiting=waiting, restarts=restarts)])


def crashing_pod(restarts: int, *, waiting: bool = True) -> dict:
    return pod(SERVER, now=now(), containers=[container_status(
        restarts=restarts, waiting={"reason": "CrashLoopBackOff"} if waiting else None, running=not waiting,
        last_terminated={"exitCode": 1, "reason": "Error"})])


def recovers_at(cluster: FakeCluster, clock: FakeClock, sleep: int) -> None:
    def serve(n: int) -> None:
        if n == sleep:
            cluster.put(deployment(ready=1), ready_server_pod(SERVER, now=now()), *ready_slices([SERVER]))
    clock.on_sleep.append(serve)


@pytest.mark.parametrize("waiting, events, cause", [
    ({"reason": "ErrImagePull", "message": f"rpc error: code = NotFound desc = {RESOLVE}{REF}: not found"}, [],
     "image-not-found"),
    ({"reason": "ErrImagePull", "message": f"{RESOLVE}pull access denied, repository does not exist or may require "
                                           "authorization: server message: insufficient_scope"}, [], "image-access-denied"),
    ({"reason": "InvalidImageName", "message": "couldn't parse image name"}, [], "invalid-image-name"),
    # The back-off names no cause: the kubelet's Failed event, read as evidence, does.
    ({"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{REF}"'},
     [f'Failed to pull image "{REF}": {RESOLVE}{REF}: not found'], "image-not-found"),
    ({"reason": "CreateContainerConfigError", "message": 'secret "llama-hf-token" not found'}, [], "secret-missing"),
], ids=["not-found", "access-denied", "invalid-name", "backoff-with-event", "missing-secret"])
def test_a_definitive_waiting_cause_fails_within_30s(waiting: dict, events: list[str], cause: str) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(ready=0), waiting_pod(waiting),
                *[event(SERVER, "Failed", text, now=now(), seq=i) for i, text in enumerate(events)])

    with pytest.raises(ModelNotServing) as raised:
        wait_serving(cluster, clock, PROPS)

    assert sum(clock.sleeps) <= FAIL_FAST
    message = str(raised.value)
    assert message.startswith("model llama is ERROR:") and SERVER in message
    assert "reason: image-pull" in message or "reason: container-config" in message


@pytest.mark.parametrize("tail, reason", [
    ("KeyError: 'getpwuid(): uid not found: 1001'", "uid-unknown"),
    ("ValueError: Invalid repository ID or local directory specified: '/model-store/weights'.", "weights-missing"),
])
def test_a_definitive_crash_fails_at_its_first_restart(tail: str, reason: str) -> None:
    """Below the restart threshold the status still reads the crashing pod's log: its words decide."""
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(ready=0), crashing_pod(1))
    cluster.logs[SERVER] = f"INFO starting\n{tail}\n"

    with pytest.raises(ModelNotServing, match=f"reason: {reason}"):
        wait_serving(cluster, clock, PROPS)
    assert sum(clock.sleeps) <= FAIL_FAST


def test_oom_killed_fails_at_once() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(ready=0), pod(SERVER, now=now(), containers=[container_status(
        restarts=1, running=True, last_terminated={"exitCode": 137, "reason": "OOMKilled"})]))
    with pytest.raises(ModelNotServing, match="reason: oom-killed"):
        wait_serving(cluster, clock, PROPS)
    assert clock.sleeps == []


TIMEOUT = {"reason": "ErrImagePull", "message": f"{RESOLVE}dial tcp 104.16.0.1:443: i/o timeout"}


@pytest.mark.parametrize("waiting", [
    TIMEOUT,
    {"reason": "ErrImagePull", "message": f"{RESOLVE}unexpected status code 503 Service Unavailable"},
    {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{REF}"'},
], ids=["io-timeout", "registry-503", "bare-backoff"])
def test_a_transient_pull_that_recovers_is_waited_out(waiting: dict) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(ready=0), waiting_pod(waiting))
    recovers_at(cluster, clock, 20)  # 40 s of simulated retries

    status = wait_serving(cluster, clock, PROPS)

    assert (status.state, status.targets) == (READY, [SERVER])
    assert len(clock.sleeps) == 20


def test_a_transient_pull_that_never_recovers_fails_at_the_pending_timeout() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    started = clock()
    # The pod ages with the simulated clock (the pending clock reads the pod's creationTimestamp).
    cluster.put(deployment(ready=0), waiting_pod(TIMEOUT))
    clock.on_sleep.append(lambda n: cluster.put(waiting_pod(TIMEOUT, age=5 + clock() - started)))

    with pytest.raises(ModelNotServing) as raised:
        wait_serving(cluster, clock, PROPS, pending_timeout_seconds=120)

    message = str(raised.value)
    assert "reason: image-pull" in message and "still cannot pull image" in message and "i/o timeout" in message
    assert 110 <= clock() - started <= 125  # not before the timeout, and not the generic deadline


def test_one_restart_that_recovers_is_waited_out() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(ready=0), crashing_pod(1))
    cluster.logs[SERVER] = "RuntimeError: Engine core initialization failed. See root cause above.\n"
    recovers_at(cluster, clock, 10)

    status = wait_serving(cluster, clock, PROPS)

    assert status.state == READY and len(clock.sleeps) == 10


@pytest.mark.parametrize("threshold", [None, 5])
def test_a_crash_that_does_not_recover_fails_at_the_restart_threshold(threshold) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    restarts = {"n": 1}
    cluster.put(deployment(ready=0), crashing_pod(1))
    cluster.logs[SERVER] = "RuntimeError: Engine core initialization failed. See root cause above.\n"

    def crash_again(n: int) -> None:
        if n % 5 == 0:  # the kubelet restarts it every 10 s of simulated time
            restarts["n"] += 1
            cluster.put(crashing_pod(restarts["n"]))
    clock.on_sleep.append(crash_again)

    with pytest.raises(ModelNotServing) as raised:
        wait_serving(cluster, clock, PROPS, **({"restart_threshold": threshold} if threshold else {}))

    expected = threshold or DEFAULT_RESTART_THRESHOLD
    assert restarts["n"] == expected  # not one restart earlier
    message = str(raised.value)
    assert "reason: crash-loop" in message and "keeps crashing (exit code 1)" in message
    assert "Engine core initialization failed" in message  # the log tail


# --- the weights gate (providers/gate.py): a puller pod that can never start ------------------------


GATE_PROPS = {"namespace": NS, "model": "llama", "weights_claim": "llama-weights-1a2b3c4d", "puller_job": PULLER_JOB,
              "model_source": "meta-llama/Llama-3.1-8B-Instruct@main", "deadline_seconds": 600, "poll_seconds": 0.5,
              "kubeconfig": "", "context": ""}
PULLER_POD = f"{PULLER_JOB}-x7k2p"


def puller_waiting(waiting: dict) -> dict:
    return pod(PULLER_POD, component="weights-puller", phase="Pending", job=PULLER_JOB, now=now(),
               containers=[container_status("puller", image="docker.io/library/python:3.12", waiting=waiting)])


def gate_wait(cluster: FakeCluster, clock: FakeClock) -> dict:
    return gate.wait_for_job(cluster.clients(), GateProps.from_dict(GATE_PROPS), sleep=clock.sleep, clock=clock, rerun=False)


@pytest.mark.parametrize("waiting, events, cause", [
    ({"reason": "CreateContainerConfigError", "message": 'secret "llama-hf-token" not found'}, [], "secret-missing"),
    ({"reason": "ErrImagePull", "message": f"{RESOLVE}docker.io/library/python:3.99: not found"}, [], "image-not-found"),
    ({"reason": "ImagePullBackOff", "message": 'Back-off pulling image "docker.io/library/python:3.12"'},
     ['Failed to pull image "docker.io/library/python:3.12": failed to authorize: 401 Unauthorized'],
     "image-access-denied"),
], ids=["missing-token-secret", "image-not-found", "backoff-access-denied"])
def test_the_gate_fails_within_30s_on_a_puller_that_can_never_start(waiting: dict, events: list, cause: str) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(job(state="running"), puller_waiting(waiting),
                *[event(PULLER_POD, "Failed", text, now=now(), seq=i) for i, text in enumerate(events)])

    with pytest.raises(WeightsNotReady) as raised:
        gate_wait(cluster, clock)

    assert sum(clock.sleeps) <= FAIL_FAST
    message = str(raised.value)
    assert f"the puller pod {PULLER_POD} cannot start" in message and f"reason: {cause}" in message


def test_the_gate_waits_out_a_transient_puller_pull() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(job(state="running"), puller_waiting(TIMEOUT))
    clock.on_sleep.append(lambda n: n == 60 and cluster.put(job(state="succeeded")))  # 30 s of retries

    assert gate.job_succeeded(gate_wait(cluster, clock))
    assert len(clock.sleeps) == 60
    assert 5 <= cluster.count("list_namespaced_pod") <= 7  # pods checked every 5 s, not at every poll


# --- the operator path (the same status provider, operator observer) reads a restarting pod's evidence too ---------------

def test_a_nim_pod_with_a_definitive_crash_fails_at_its_first_restart() -> None:
    from test_nim_status import PROPS as NIM_PROPS
    from test_nim_status import SERVICE as NIM_SERVICE
    from test_nim_status import FakeCluster as NimCluster
    from test_nim_status import serving as nim_serving


    cluster = NimCluster()
    nim_serving(cluster)
    cluster.set("nimservices", NIM_SERVICE, {"state": "NotReady"})
    cluster.slices = []
    cluster.pods[0]["status"]["containerStatuses"][0].update(
        ready=False, restartCount=1, state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"exitCode": 1, "reason": "Error"}})
    clock = FakeClock()
    with pytest.raises(NimModelNotServing, match="uid-unknown"):
        nim_wait({**NIM_PROPS, "ready_timeout_seconds": 600}, sleep=clock.sleep, clock=clock,
                 connect=lambda t: cluster.clients())
    assert sum(clock.sleeps) <= FAIL_FAST


def test_a_nim_pod_restarting_once_is_waited_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from test_nim_status import PROPS as NIM_PROPS
    from test_nim_status import SERVICE as NIM_SERVICE
    from test_nim_status import FakeCluster as NimCluster
    from test_nim_status import serving as nim_serving


    cluster = NimCluster()
    nim_serving(cluster)
    cluster.set("nimservices", NIM_SERVICE, {"state": "NotReady"})
    slices, cluster.slices = cluster.slices, []

    # This fake's log is the uid crash; here the crash is one with no definitive words.
    monkeypatch.setattr(observe_module, "read_logs", lambda *_: "RuntimeError: Engine core initialization failed.")
    container = cluster.pods[0]["status"]["containerStatuses"][0]
    healthy = dict(container)
    container.update(ready=False, restartCount=1, state={"waiting": {"reason": "CrashLoopBackOff"}},
                     lastState={"terminated": {"exitCode": 1, "reason": "Error"}})
    sleeps: list[float] = []

    def recover(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            container.clear()
            container.update({**healthy, "restartCount": 1})
            cluster.slices = slices
            cluster.set("nimservices", NIM_SERVICE, {"state": "Ready"})

    status = nim_wait(NIM_PROPS, sleep=recover, clock=lambda: 0.0, connect=lambda t: cluster.clients())
    assert status.state == READY and len(sleeps) == 3


def test_a_replica_whose_pull_never_recovered_is_named_by_its_pull_not_as_pending() -> None:
    """The rollout check (status.stuck_replica -> projection.lagging_replica) of a replica that
    waited out its pending timeout on a transient pull quotes the pull's last words."""
    stuck = pod(SERVER, phase="Pending", age=1000, containers=[container_status(waiting=TIMEOUT)])
    status = lagging_replica(Observation(model="llama", pods=[stuck], now=NOW, pending_timeout_seconds=900))
    assert status is not None and status.reason == "image-pull" and "i/o timeout" in status.message
