"""WeightsGateProvider: waits for the puller Job, hands the volume off, fails with the reason.

``providers.kube.connect`` is patched to return the in-memory API of ``fakes.py``; timing knobs are
the gate's own inputs (``poll_seconds``, ``deadline_seconds``) or injected clock/sleep.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import dill
import pytest
from pulumi.dynamic import dynamic as pulumi_dynamic

from contract.props import GateProps
from providers import gate, kube
from providers.gate import WeightsGateProvider, WeightsNotReady
from providers.inputs import UNKNOWN_INPUT as UNKNOWN
from providers.projection import job_succeeded
from providers.status import ModelStatusProvider
from tests.support.fakes import (
    CLAIM,
    NOW,
    NS,
    PULLER_JOB,
    REPO,
    SOURCE,
    FakeClock,
    FakeCluster,
    api_error,
    container_status,
    event,
    job,
    pod,
    protocol_error,
    pvc,
)

ROOT = Path(__file__).resolve().parents[2]
PULLER_POD = f"{PULLER_JOB}-x7k2p"

PROPS = {
    "namespace": NS, "model": "llama", "weights_claim": CLAIM, "puller_job": PULLER_JOB,
    "model_source": SOURCE, "deadline_seconds": 30, "poll_seconds": 0.001,
    "kubeconfig": "", "context": "",
}
GATE = GateProps.from_dict(PROPS)


def puller_pod(name: str = PULLER_POD, *, phase: str = "Succeeded", age: float = 60, **kwargs) -> dict:
    return pod(name, component="weights-puller", phase=phase, age=age, job=PULLER_JOB,
               containers=[container_status("puller", terminated={"exitCode": 0 if phase == "Succeeded" else 1,
                                                                  "reason": "Completed" if phase == "Succeeded" else "Error"})],
               **kwargs)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = FakeCluster().put(pvc())
    connected: list[kube.Target] = []

    def connect(target: kube.Target) -> kube.Clients:
        connected.append(target)
        return fake.clients()

    monkeypatch.setattr(kube, "connect", connect)
    # create() hands off with the real clock: a regression that never frees the volume fails in seconds.
    monkeypatch.setattr(gate, "HANDOFF_TIMEOUT_SECONDS", 2)
    fake.connected = connected  # type: ignore[attr-defined]
    return fake


# --- create -------------------------------------------------------------------------------------

def test_create_waits_for_success_then_hands_off_and_returns_full_outputs(cluster: FakeCluster) -> None:
    succeeded = job(state="succeeded", completed_age=42)
    cluster.put(job(state="running"), puller_pod(phase="Running"))
    cluster.when("read_namespaced_job", 3, lambda c: c.put(succeeded, puller_pod(phase="Succeeded")))

    result = WeightsGateProvider().create(dict(PROPS))

    assert cluster.count("read_namespaced_job") == 3
    assert result.id == f"{NS}/{CLAIM}"
    # completed_at is the finished Job's completionTime (42 s before the fake's NOW), not a clock
    # read; the Kubernetes client hands it back as an ISO time with an explicit UTC offset.
    completed = (NOW - timedelta(seconds=42)).isoformat()
    assert succeeded["status"]["completionTime"] == completed.replace("+00:00", "Z")
    assert result.outs == {**PROPS, "weights_ready": True, "completed_at": completed}
    # P2 hand-off: the finished Job's pod is gone, the Job stays as the record of the pull.
    assert cluster.deleted == [("Pod", PULLER_POD)]
    assert cluster.names("Pod") == []
    assert cluster.get("Job", PULLER_JOB) is not None
    assert cluster.count("delete_namespaced_job") == 0
    assert cluster.connected == [kube.Target(None, None)]  # type: ignore[attr-defined]


def test_hand_off_deletes_every_pod_of_the_job_and_waits_until_they_are_gone() -> None:
    cluster = FakeCluster().put(job(state="succeeded"), puller_pod(f"{PULLER_JOB}-aaaaa", phase="Failed", age=300),
                                puller_pod(f"{PULLER_JOB}-bbbbb", age=60),
                                pod("other-job-pod", component="weights-puller", job="other-puller"))
    cluster.graceful_delete = True  # pods linger (deletionTimestamp set) for one more list
    clock = FakeClock()

    deleted = gate.hand_off(cluster.clients(), GATE, sleep=clock.sleep, clock=clock)

    assert deleted == 2
    assert sorted(name for _, name in cluster.deleted) == [f"{PULLER_JOB}-aaaaa", f"{PULLER_JOB}-bbbbb"]
    assert cluster.count("delete_namespaced_pod") == 2  # a pod already terminating is not deleted again
    assert cluster.names("Pod") == ["other-job-pod"]
    assert len(clock.sleeps) >= 1


def test_hand_off_with_no_pods_left_is_immediate() -> None:
    cluster = FakeCluster().put(job(state="succeeded"))
    assert gate.hand_off(cluster.clients(), GATE, sleep=pytest.fail, clock=FakeClock()) == 0


def test_hand_off_tolerates_a_pod_deleted_meanwhile() -> None:
    cluster = FakeCluster().put(job(state="succeeded"), puller_pod())
    cluster.fail("delete_namespaced_pod", api_error(404))
    cluster.when("list_namespaced_pod", 2, lambda c: c.remove("Pod", PULLER_POD))
    clock = FakeClock()
    assert gate.hand_off(cluster.clients(), GATE, sleep=clock.sleep, clock=clock) == 0


def test_hand_off_times_out_on_a_pod_that_never_goes() -> None:
    cluster = FakeCluster().put(job(state="succeeded"), puller_pod(finalizers=["example.com/hold"]))
    clock = FakeClock()
    with pytest.raises(WeightsNotReady, match="still hold the weights volume.*finalizers"):
        gate.hand_off(cluster.clients(), GATE, sleep=clock.sleep, clock=clock)
    assert cluster.count("delete_namespaced_pod") == 1


GATED_LOG = (f"huggingface_hub.errors.GatedRepoError: 403 Client Error.\n\nCannot access gated repo for url "
             f"https://huggingface.co/api/models/{REPO}/revision/main.\nAccess to model {REPO} is restricted and "
             f"you are not in the authorized list.\n")


def test_a_failed_job_raises_the_reason_with_the_latest_log_tail_and_is_kept(cluster: FakeCluster) -> None:
    old, new = f"{PULLER_JOB}-zzzzz", f"{PULLER_JOB}-aaaaa"  # listed by name: the newest is listed first
    cluster.put(job(state="failed"), puller_pod(old, phase="Failed", age=600), puller_pod(new, phase="Failed", age=60),
                event(new, "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
    cluster.logs = {old: "requests.exceptions.ConnectionError: first attempt timed out", new: GATED_LOG}

    with pytest.raises(WeightsNotReady) as raised:
        WeightsGateProvider().create(dict(PROPS))

    message = str(raised.value)
    assert "reason: access-denied" in message and REPO in message
    assert f"log tail of {new}" in message and "not in the authorized list" in message
    assert "kept for its logs" in message
    # A failed puller is kept: neither the Job nor its pods are deleted.
    assert cluster.deleted == [] and cluster.count("delete_namespaced_pod") == 0
    assert cluster.get("Job", PULLER_JOB) is not None and cluster.names("Pod") == [new, old]


@pytest.mark.parametrize("log, reason", [
    ("OSError: [Errno 28] No space left on device", "disk-full"),
    ("huggingface_hub.errors.RevisionNotFoundError: 404 Client Error.\nRevision Not Found for url: x\nInvalid rev id: v9",
     "revision-not-found"),
    ("huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error.\n\nRepository Not Found for url: x.\n"
     "If you are trying to access a private or gated repo, make sure you are authenticated.", "repo-not-found"),
])
def test_failed_job_reasons(cluster: FakeCluster, log: str, reason: str) -> None:
    cluster.put(job(state="failed"), puller_pod(phase="Failed"))
    cluster.logs[PULLER_POD] = log
    with pytest.raises(WeightsNotReady, match=f"reason: {reason}"):
        WeightsGateProvider().create(dict(PROPS))


def test_a_job_past_its_active_deadline_raises_deadline_exceeded(cluster: FakeCluster) -> None:
    cluster.put(job(state="failed", reason="DeadlineExceeded", message="Job was active longer than specified deadline"),
                puller_pod(phase="Failed"))
    with pytest.raises(WeightsNotReady, match="reason: deadline-exceeded"):
        WeightsGateProvider().create(dict(PROPS))
    assert cluster.deleted == []


def test_the_gates_own_deadline_raises(cluster: FakeCluster) -> None:
    cluster.put(job(state="running"), puller_pod(phase="Running"))
    with pytest.raises(WeightsNotReady, match=r"not ready after 0.05s.*still running"):
        WeightsGateProvider().create({**PROPS, "deadline_seconds": 0.05, "poll_seconds": 0.005})
    assert cluster.deleted == []


def test_the_deadline_with_an_injected_clock() -> None:
    cluster = FakeCluster().put(job(state="running"))
    clock = FakeClock()
    with pytest.raises(WeightsNotReady, match="not ready after 600s"):
        gate.wait_for_job(cluster.clients(), GateProps.from_dict({**PROPS, "deadline_seconds": 600, "poll_seconds": 5}),
                          sleep=clock.sleep, clock=clock)
    assert 600 <= sum(clock.sleeps) <= 610 and set(clock.sleeps) == {5}


def test_a_missing_job_says_what_to_do(cluster: FakeCluster) -> None:
    with pytest.raises(WeightsNotReady, match="does not exist.*pulumi refresh"):
        WeightsGateProvider().create(dict(PROPS))


def test_a_transient_fault_while_waiting_is_retried(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube.call, "__kwdefaults__", {**kube.call.__kwdefaults__, "sleep": lambda _: None})
    cluster.put(job(state="succeeded"), puller_pod())
    cluster.fail("read_namespaced_job", protocol_error).fail("read_namespaced_job", lambda: api_error(429, retry_after=1))
    assert WeightsGateProvider().create(dict(PROPS)).outs["weights_ready"] is True


def test_an_api_outage_longer_than_one_calls_retries_keeps_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube.call, "__kwdefaults__", {**kube.call.__kwdefaults__, "sleep": lambda _: None})
    cluster = FakeCluster().put(job(state="succeeded"))
    cluster.fail("read_namespaced_job", protocol_error, times=kube.MAX_ATTEMPTS * 2)
    clock = FakeClock()
    finished = gate.wait_for_job(cluster.clients(), GateProps.from_dict({**PROPS, "deadline_seconds": 600, "poll_seconds": 5}),
                                 sleep=clock.sleep, clock=clock)
    assert job_succeeded(finished)


# --- diff / update / read -----------------------------------------------------------------------

OLDS = {**PROPS, "weights_ready": True, "completed_at": "2025-06-01T11:00:00+00:00", "__provider": "pickled"}


@pytest.mark.parametrize("key, value", [
    ("model_source", f"{REPO}@v2"), ("puller_job", "llama-puller-99999999"), ("weights_claim", "llama-weights-99999999"),
    ("namespace", "other"), ("model", "llama-2"),
])
def test_a_change_of_the_weights_replaces_the_gate(key: str, value: str) -> None:
    news = {**PROPS, key: value, "__provider": "pickled"}
    result = WeightsGateProvider().diff(f"{NS}/{CLAIM}", OLDS, news)
    assert result.changes is True and result.replaces == [key] and result.delete_before_replace is False


@pytest.mark.parametrize("key, value", [("deadline_seconds", 7200), ("poll_seconds", 2), ("kubeconfig", "/k"), ("context", "c")])
def test_other_changes_update_in_place(key: str, value) -> None:
    result = WeightsGateProvider().diff(f"{NS}/{CLAIM}", OLDS, {**PROPS, key: value, "__provider": "pickled"})
    assert result.changes is True and result.replaces == []


def test_no_change_and_provider_churn_are_no_diff() -> None:
    result = WeightsGateProvider().diff(f"{NS}/{CLAIM}", OLDS, {**PROPS, "__provider": "re-pickled"})
    assert result.changes is False and result.replaces == []


@pytest.mark.parametrize("key", ["model_source", "puller_job", "weights_claim"])
def test_a_preview_unknown_weights_input_is_a_replace(key: str) -> None:
    assert UNKNOWN == "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    result = WeightsGateProvider().diff(f"{NS}/{CLAIM}", OLDS, {**PROPS, key: UNKNOWN, "__provider": "pickled"})
    assert result.changes is True and key in result.replaces


def test_a_preview_unknown_other_input_is_a_change() -> None:
    result = WeightsGateProvider().diff(f"{NS}/{CLAIM}", OLDS, {**PROPS, "deadline_seconds": UNKNOWN})
    assert result.changes is True and result.replaces == []


def test_update_returns_full_outputs_and_keeps_the_record(cluster: FakeCluster) -> None:
    news = {**PROPS, "deadline_seconds": 7200}
    result = WeightsGateProvider().update(f"{NS}/{CLAIM}", OLDS, news)
    assert result.outs == {**news, "weights_ready": True, "completed_at": OLDS["completed_at"]}
    assert cluster.calls == []  # nothing to wait for: same weights


def test_read_keeps_the_gate_while_volume_and_success_stand(cluster: FakeCluster) -> None:
    cluster.put(job(state="succeeded"))
    result = WeightsGateProvider().read(f"{NS}/{CLAIM}", dict(OLDS))
    assert result.id == f"{NS}/{CLAIM}" and result.outs == OLDS


@pytest.mark.parametrize("setup", [
    lambda c: c.remove("PersistentVolumeClaim", CLAIM),
    lambda c: c.put(job(state="running")),
    lambda c: c.put(job(state="failed")),
    lambda c: c.remove("Job", PULLER_JOB),
], ids=["pvc-gone", "job-running", "job-failed", "job-gone"])
def test_read_drops_the_gate_when_weights_are_not_standing(cluster: FakeCluster, setup) -> None:
    cluster.put(job(state="succeeded"))
    setup(cluster)
    result = WeightsGateProvider().read(f"{NS}/{CLAIM}", dict(OLDS))
    assert result.id is None


def test_delete_touches_nothing(cluster: FakeCluster) -> None:
    assert WeightsGateProvider().delete(f"{NS}/{CLAIM}", dict(OLDS)) is None
    assert cluster.calls == []


# --- pickling and import hygiene ------------------------------------------------------------------

def test_the_provider_pickles_with_dill_as_the_engine_does(cluster: FakeCluster) -> None:
    provider = WeightsGateProvider()
    cluster.put(job(state="succeeded"), puller_pod())
    provider.create(dict(PROPS))  # using it must not leave clients or locks on the instance
    assert vars(provider) == {}

    serialized = pulumi_dynamic.serialize_provider(provider)
    restored = dill.loads(base64.b64decode(serialized))
    assert type(restored).__name__ == "WeightsGateProvider"
    assert restored.diff("id", OLDS, {**PROPS}).changes is False
    assert dill.loads(dill.dumps(provider, recurse=True)).__class__ is WeightsGateProvider


def test_the_status_provider_pickles_with_dill() -> None:
    restored = dill.loads(base64.b64decode(pulumi_dynamic.serialize_provider(ModelStatusProvider())))
    assert type(restored).__name__ == "ModelStatusProvider" and vars(restored) == {}


def _python(code: str, **env: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_importing_the_providers_has_no_side_effects() -> None:
    """The provider host imports these modules to unpickle a provider: no client, no config, no I/O."""
    out = _python(
        "import sys, json\n"
        "import providers.gate, providers.status, providers.observe, providers.projection, providers.kube\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.'))))\n",
        KUBECONFIG="/nonexistent/kubeconfig",
    )
    assert json.loads(out) == []


def test_a_pickled_provider_loads_in_a_fresh_process() -> None:
    """Like the provider host: unpickle in a process that never imported the program."""
    serialized = pulumi_dynamic.serialize_provider(WeightsGateProvider())
    out = _python(
        "import base64, sys, dill\n"
        f"p = dill.loads(base64.b64decode({serialized!r}))\n"
        "print(type(p).__module__, type(p).__name__, 'kubernetes' in sys.modules)\n",
    )
    assert out.split() == ["providers.gate", "WeightsGateProvider", "False"]
