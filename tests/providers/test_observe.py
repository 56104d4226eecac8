"""Reading one model from the cluster (providers.observe) and the bounded API retries (providers.kube).

Runs against the in-memory API of ``fakes.py``: real typed client models, counted calls,
injected faults. No test sleeps for real: ``kube.call``'s ``sleep`` is injected or recorded.
"""

from __future__ import annotations

import pytest
import urllib3

from providers import kube
from providers.observe import ModelRef, current_status
from providers.projection import ERROR, PENDING, READY, UNKNOWN
from tests.support.fakes import (
    DEPLOYMENT,
    NOW,
    NS,
    PULLER_JOB,
    SERVICE,
    FakeCluster,
    api_error,
    container_status,
    deployment,
    event,
    job,
    pod,
    protocol_error,
    ready_server_pod,
    ready_slices,
)

REF = ModelRef(namespace=NS, model="llama", deployment=DEPLOYMENT, service=SERVICE, puller_job=PULLER_JOB,
               pending_timeout_seconds=900)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record kube.call's backoff instead of sleeping (its sleep is a keyword default)."""
    recorded: list[float] = []
    monkeypatch.setattr(kube.call, "__kwdefaults__", {**kube.call.__kwdefaults__, "sleep": recorded.append})
    return recorded


def healthy(replicas: int) -> FakeCluster:
    names = [f"llama-server-7d9f8c6b5-{i:05d}" for i in range(replicas)]
    return FakeCluster().put(
        deployment(replicas=replicas, ready=replicas), *[ready_server_pod(n) for n in names],
        *ready_slices(names), job(state="succeeded"),
    )


# --- cost and correctness of one read ----------------------------------------------------------

@pytest.mark.parametrize("replicas", [1, 8])
def test_healthy_status_costs_at_most_three_calls_whatever_the_replicas(replicas: int) -> None:
    cluster = healthy(replicas)
    clients = cluster.clients()

    status = current_status(clients, REF, now=NOW)

    assert status.state == READY, status.message
    assert len(status.targets) == replicas
    assert cluster.count() <= 3 and clients.calls <= 3, cluster.counts()
    assert cluster.count("read_namespaced_pod_log") == cluster.count("list_namespaced_event") == 0


def test_deployment_not_found_and_puller_running_is_pending() -> None:
    cluster = FakeCluster().put(job(state="running"),
                                pod("llama-puller-1a2b3c4d-abcde", component="weights-puller", job=PULLER_JOB))
    status = current_status(cluster.clients(), REF, now=NOW)
    assert (status.state, status.reason) == (PENDING, "pulling")
    assert cluster.count("read_namespaced_job") == 1


def test_nothing_there_yet_is_pending() -> None:
    status = current_status(FakeCluster().clients(), REF, now=NOW)
    assert (status.state, status.reason) == (PENDING, "not-created")


def test_failed_puller_reads_the_latest_pods_log_and_events() -> None:
    cluster = FakeCluster().put(
        job(state="failed"),
        # Lists come back sorted by name: the newest pod is not the last one listed.
        pod("llama-puller-1a2b3c4d-zzzzz", component="weights-puller", phase="Failed", age=600, job=PULLER_JOB),
        pod("llama-puller-1a2b3c4d-aaaaa", component="weights-puller", phase="Failed", age=60, job=PULLER_JOB),
        event("llama-puller-1a2b3c4d-aaaaa", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
    )
    cluster.logs = {"llama-puller-1a2b3c4d-zzzzz": "requests.exceptions.ConnectionError: timed out",
                    "llama-puller-1a2b3c4d-aaaaa": "OSError: [Errno 28] No space left on device"}

    status = current_status(cluster.clients(), REF, now=NOW)

    assert (status.state, status.reason) == (ERROR, "disk-full")
    assert status.details["pod"] == "llama-puller-1a2b3c4d-aaaaa"
    assert "No space left on device" in status.details["logTail"]
    assert any("BackoffLimitExceeded" in line for line in status.details["events"])
    logged = [args[0] for m, args, _ in cluster.calls if m == "read_namespaced_pod_log"]
    assert logged == ["llama-puller-1a2b3c4d-aaaaa"]


def test_crash_loop_fetches_evidence_for_the_named_pod_only() -> None:
    cluster = healthy(8)
    cluster.put(pod("llama-server-7d9f8c6b5-crash", containers=[container_status(
        restarts=4, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})]),
        event("llama-server-7d9f8c6b5-crash", "BackOff", "Back-off restarting failed container server"),
        event("llama-server-7d9f8c6b5-00000", "Pulled", "unrelated", type_="Normal"))
    cluster.logs["llama-server-7d9f8c6b5-crash"] = "RuntimeError: Engine core initialization failed"

    status = current_status(cluster.clients(), REF, now=NOW)

    assert (status.state, status.reason, status.pod) == (ERROR, "crash-loop", "llama-server-7d9f8c6b5-crash")
    assert "Engine core initialization failed" in status.details["logTail"]
    assert status.details["events"] == ["BackOff: Back-off restarting failed container server"]
    assert cluster.count("read_namespaced_pod_log") == 1
    assert cluster.count("list_namespaced_event") == 1
    assert cluster.count() == 5


def test_a_restarted_crash_quotes_the_attempt_that_crashed() -> None:
    """Once the kubelet started the container again, the crash's words are in the previous
    attempt's log; the current one is the new start's (seen on the real node: an empty tail).
    (Waiting in CrashLoopBackOff, both reads give the crashed attempt: the test above.)"""
    name = "llama-server-7d9f8c6b5-crash"
    cluster = FakeCluster().put(deployment(ready=0), pod(name, containers=[container_status(
        restarts=3, last_terminated={"exitCode": 1, "reason": "Error"}, running=True)]))
    cluster.logs[name] = "INFO api_server.py: vLLM API server version 0.32.0"
    cluster.previous_logs[name] = "ValueError: User-specified max_model_len (4096) is greater than the derived max_model_len"

    status = current_status(cluster.clients(), REF, now=NOW)

    assert (status.state, status.reason) == (ERROR, "crash-loop")
    assert "User-specified max_model_len" in status.details["logTail"], status.details
    (call,) = [kwargs for m, _, kwargs in cluster.calls if m == "read_namespaced_pod_log"]
    assert (call.get("container"), call.get("previous")) == ("server", True)


def test_a_crash_not_yet_restarted_quotes_its_current_log() -> None:
    name = "llama-server-7d9f8c6b5-crash"
    cluster = FakeCluster().put(deployment(ready=0), pod(name, containers=[container_status(
        terminated={"exitCode": 1, "reason": "Error"})]))
    cluster.logs[name] = "KeyError: 'getpwuid(): uid not found: 2000'"  # definitive: the verdict at once
    cluster.previous_logs[name] = "nothing before"

    status = current_status(cluster.clients(), REF, now=NOW)

    assert (status.state, status.reason) == (ERROR, "uid-unknown")
    assert "getpwuid" in status.details["logTail"], status.details
    (call,) = [kwargs for m, _, kwargs in cluster.calls if m == "read_namespaced_pod_log"]
    assert "previous" not in call


def test_multi_attach_is_found_from_events_read_as_evidence() -> None:
    """Scheduled but stuck: only the events say why, and they are read once the pod is overdue."""
    cluster = FakeCluster().put(
        deployment(ready=0),
        pod("llama-server-new", phase="Pending", age=1800, containers=[container_status(waiting={"reason": "ContainerCreating"})]),
        event("llama-server-new", "FailedAttachVolume",
              'Multi-Attach error for volume "pvc-1" Volume is already used by pod(s) llama-puller-1a2b3c4d-x'),
    )
    status = current_status(cluster.clients(), REF, now=NOW)
    assert (status.state, status.reason) == (ERROR, "multi-attach")


def test_evidence_that_cannot_be_read_does_not_hide_a_diagnosis() -> None:
    """Logs and events are evidence, not the state: a 403 on them keeps the ERROR (no UNKNOWN)."""
    cluster = FakeCluster().put(deployment(ready=0), pod("llama-server-x", containers=[container_status(
        restarts=3, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})]))
    cluster.fail_always("list_namespaced_event", lambda: api_error(403))
    cluster.fail_always("read_namespaced_pod_log", lambda: api_error(403))

    status = current_status(cluster.clients(), REF, now=NOW)

    assert (status.state, status.reason) == (ERROR, "crash-loop"), status.message
    assert "log unavailable" in status.details["logTail"]


# --- UNKNOWN: never a guess --------------------------------------------------------------------

@pytest.mark.parametrize("method", ["read_namespaced_deployment", "list_namespaced_pod", "list_namespaced_endpoint_slice"])
@pytest.mark.parametrize("fault", [lambda: api_error(403), lambda: api_error(503), protocol_error,
                                   lambda: api_error(429, retry_after=1)], ids=["403", "503", "protocol", "429"])
def test_a_read_failure_is_unknown(method: str, fault, sleeps: list[float]) -> None:
    cluster = healthy(2)
    cluster.fail_always(method, fault)

    status = current_status(cluster.clients(), REF, now=NOW)

    assert (status.state, status.reason) == (UNKNOWN, "read-failed")
    assert "could not be read" in status.message
    assert status.targets == [] and status.ready_replicas == 0  # nothing half-read leaks out as a guess


def test_a_failed_job_read_is_unknown_not_pending(sleeps: list[float]) -> None:
    cluster = FakeCluster().put(job(state="failed"))
    cluster.fail_always("read_namespaced_job", lambda: api_error(500))
    assert current_status(cluster.clients(), REF, now=NOW).state == UNKNOWN


def test_a_transient_fault_is_absorbed(sleeps: list[float]) -> None:
    cluster = healthy(1)
    cluster.fail("list_namespaced_pod", lambda: api_error(429, retry_after=1))
    cluster.fail("list_namespaced_endpoint_slice", protocol_error)
    assert current_status(cluster.clients(), REF, now=NOW).state == READY
    assert len(sleeps) == 2


# --- kube.call: bounded retries ----------------------------------------------------------------

class Flaky:
    def __init__(self, *errors: BaseException):
        self.errors = list(errors)
        self.calls = 0
        self.__name__ = "read_namespaced_thing"

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return {"args": args, "kwargs": kwargs}


@pytest.mark.parametrize("error", [api_error(429), api_error(500), api_error(502), api_error(503), api_error(504),
                                   protocol_error(), urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out"),
                                   ConnectionResetError(104, "reset"), TimeoutError("timed out")],
                         ids=["429", "500", "502", "503", "504", "protocol", "read-timeout", "conn-reset", "timeout"])
def test_retryable_faults_are_retried_then_succeed(error: BaseException) -> None:
    fn, slept = Flaky(error, error), []
    clients = FakeCluster().clients()
    assert kube.call(clients, fn, "a", namespace="b", sleep=slept.append) == {"args": ("a",), "kwargs": {"namespace": "b"}}
    assert fn.calls == 3 and clients.calls == 3 and len(slept) == 2


def test_persistent_faults_are_bounded_then_cluster_unreachable() -> None:
    fn, slept = Flaky(*[api_error(503) for _ in range(100)]), []
    with pytest.raises(kube.ClusterUnreachable, match="read_namespaced_thing"):
        kube.call(None, fn, sleep=slept.append)
    assert fn.calls == kube.MAX_ATTEMPTS
    assert len(slept) == kube.MAX_ATTEMPTS - 1
    # Exponential backoff with jitter, bounded.
    assert slept[0] < slept[2] < slept[4]
    assert all(0 < s <= kube.MAX_BACKOFF_SECONDS * 1.2 for s in slept)
    assert sum(slept) < 30


def test_connection_errors_are_bounded_too() -> None:
    fn, slept = Flaky(*[protocol_error() for _ in range(100)]), []
    with pytest.raises(kube.ClusterUnreachable) as raised:
        kube.call(None, fn, attempts=3, sleep=slept.append)
    assert fn.calls == 3 and len(slept) == 2
    assert isinstance(raised.value.__cause__, urllib3.exceptions.ProtocolError)


@pytest.mark.parametrize("jitter", [0.0, 0.5, 0.999])
def test_retry_after_is_honoured(jitter: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry-After is the server's minimum: jitter may lengthen the wait, never shorten it."""
    monkeypatch.setattr(kube.random, "random", lambda: jitter)
    fn, slept = Flaky(api_error(429, retry_after=3)), []
    kube.call(None, fn, sleep=slept.append)
    assert len(slept) == 1 and slept[0] >= 3, slept


def test_an_absurd_retry_after_does_not_stall_the_provider() -> None:
    fn, slept = Flaky(api_error(429, retry_after=86_400)), []
    kube.call(None, fn, sleep=slept.append)
    assert slept[0] <= 60, slept


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
def test_answers_are_not_retried(status: int) -> None:
    fn, slept = Flaky(api_error(status)), []
    clients = FakeCluster().clients()
    with pytest.raises(Exception) as raised:
        kube.call(clients, fn, sleep=slept.append)
    assert getattr(raised.value, "status", None) == status and not isinstance(raised.value, kube.ClusterUnreachable)
    assert fn.calls == 1 and clients.calls == 1 and slept == []


def test_programming_errors_are_not_retried() -> None:
    fn, slept = Flaky(TypeError("bad argument")), []
    with pytest.raises(TypeError):
        kube.call(None, fn, sleep=slept.append)
    assert fn.calls == 1 and slept == []


def test_to_dict_passes_dicts_through_and_serializes_typed_models() -> None:
    cluster = healthy(1)
    clients = cluster.clients()
    assert kube.to_dict(clients, None) is None
    plain = {"metadata": {"name": "x"}}
    assert kube.to_dict(clients, plain) is plain
    typed = clients.apps.read_namespaced_deployment(DEPLOYMENT, NS)
    assert kube.to_dict(clients, typed)["status"]["readyReplicas"] == 1  # wire shape: camelCase
