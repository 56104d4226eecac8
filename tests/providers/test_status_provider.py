"""ModelStatusProvider: `pulumi up` waits for READY, fails fast with the classified reason, and
`pulumi refresh` re-reads the status (UNKNOWN when it cannot, never an exception or a guess).

``wait_until_serving`` runs with the in-memory API of ``fakes.py`` and an injected clock/sleep.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

import pytest

from providers import kube
from providers import status as status_module
from providers.inputs import UNKNOWN_INPUT
from providers.projection import ERROR, PENDING, READY, UNKNOWN
from providers.status import STATUS_KEYS, ModelNotServing, ModelStatusProvider, wait_until_serving
from tests.support.fakes import (
    DEPLOYMENT,
    NS,
    PULLER_JOB,
    SERVER,
    STATUS_PROPS,
    FakeClock,
    FakeCluster,
    container_status,
    deployment,
    job,
    pod,
    protocol_error,
    ready_server_pod,
    ready_slices,
    wait_serving,
)


def real_now() -> datetime:
    # wait_until_serving projects against the wall clock (pending timeouts): build pods relative to it.
    return datetime.now(UTC)


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube.call, "__kwdefaults__", {**kube.call.__kwdefaults__, "sleep": lambda _: None})


def serving(cluster: FakeCluster, *, generation: int = 1) -> None:
    cluster.put(deployment(ready=1, generation=generation), ready_server_pod(SERVER, now=real_now()),
                *ready_slices([SERVER]))


# --- wait_until_serving: what only the raw path has (the shared table is test_status_paths.py) ----

def test_a_failed_puller_fails_fast() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(job(state="failed"), pod(f"{PULLER_JOB}-abcde", component="weights-puller", phase="Failed",
                                         job=PULLER_JOB, now=real_now()))
    cluster.logs[f"{PULLER_JOB}-abcde"] = "OSError: [Errno 28] No space left on device"
    with pytest.raises(ModelNotServing, match="reason: disk-full"):
        wait_serving(cluster, clock)
    assert clock.sleeps == []


# --- the provider -----------------------------------------------------------------------------

@pytest.fixture
def faked(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    cluster = FakeCluster()
    clock = FakeClock()
    monkeypatch.setattr(kube, "connect", lambda _target: cluster.clients())
    monkeypatch.setattr(status_module, "wait_until_serving", functools.partial(
        wait_until_serving, sleep=clock.sleep, clock=clock, connect=lambda _target: cluster.clients()))
    return cluster


def test_create_returns_id_and_full_outputs(faked: FakeCluster) -> None:
    serving(faked)
    result = ModelStatusProvider().create(dict(STATUS_PROPS))
    assert result.id == f"{NS}/llama"
    assert {k: result.outs[k] for k in STATUS_PROPS} == STATUS_PROPS
    assert result.outs["state"] == READY and result.outs["targets"] == [SERVER] and result.outs["ready_replicas"] == 1
    assert set(STATUS_KEYS) <= set(result.outs)


def test_update_returns_full_outputs(faked: FakeCluster) -> None:
    serving(faked)
    news = {**STATUS_PROPS, "deployment_revision": "def456"}
    olds = {**STATUS_PROPS, "state": READY, "message": "old", "reason": "ready", "details": {}, "ready_replicas": 1,
            "targets": ["old-pod"], "observed_at": "2025-01-01T00:00:00+00:00"}
    result = ModelStatusProvider().update(f"{NS}/llama", olds, news)
    assert {k: result.outs[k] for k in news} == news
    assert result.outs["targets"] == [SERVER] and result.outs["observed_at"] != olds["observed_at"]
    assert set(STATUS_KEYS) <= set(result.outs)


def test_update_fails_with_the_reason(faked: FakeCluster) -> None:
    faked.put(deployment(ready=0), pod(SERVER, now=real_now(), containers=[container_status(
        restarts=1, running=True, last_terminated={"exitCode": 137, "reason": "OOMKilled"})]))
    with pytest.raises(ModelNotServing, match="reason: oom-killed"):
        ModelStatusProvider().update(f"{NS}/llama", dict(STATUS_PROPS), dict(STATUS_PROPS))


STATE = {**STATUS_PROPS, "state": READY, "message": "serving", "reason": "ready", "details": {"revision": "r"},
         "ready_replicas": 1, "targets": [SERVER], "observed_at": "2025-01-01T00:00:00+00:00", "__provider": "pickled"}


def test_read_reprojects_the_live_status(faked: FakeCluster) -> None:
    faked.put(deployment(ready=0), pod(SERVER, now=real_now(), containers=[container_status(
        restarts=5, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})]))
    result = ModelStatusProvider().read(f"{NS}/llama", dict(STATE))
    assert result.id == f"{NS}/llama"
    assert (result.outs["state"], result.outs["reason"]) == (ERROR, "crash-loop")
    assert result.outs["targets"] == [] and result.outs["observed_at"] != STATE["observed_at"]
    assert not set(STATUS_KEYS) & set(result.inputs) and result.inputs["deployment"] == DEPLOYMENT


def test_read_is_unknown_not_an_exception_when_the_cluster_is_unreachable(faked: FakeCluster, no_backoff: None) -> None:
    serving(faked)
    faked.fail_always("*", protocol_error)
    result = ModelStatusProvider().read(f"{NS}/llama", dict(STATE))
    assert result.id == f"{NS}/llama"
    assert (result.outs["state"], result.outs["reason"]) == (UNKNOWN, "read-failed")
    assert result.outs["targets"] == [] and result.outs["ready_replicas"] == 0  # not the stale READY
    assert {k: result.outs[k] for k in STATUS_PROPS} == STATUS_PROPS


def test_read_is_unknown_when_no_client_can_be_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_target):
        raise RuntimeError("Invalid kube-config file. No configuration found.")

    monkeypatch.setattr(kube, "connect", broken)
    result = ModelStatusProvider().read(f"{NS}/llama", dict(STATE))
    assert result.outs["state"] == UNKNOWN and "No configuration found" in result.outs["message"]


def test_read_of_a_pending_model(faked: FakeCluster) -> None:
    faked.put(job(state="running"))
    result = ModelStatusProvider().read(f"{NS}/llama", dict(STATE))
    assert (result.outs["state"], result.outs["reason"]) == (PENDING, "pulling")


def test_diff_sees_changed_and_unknown_inputs_and_never_replaces() -> None:
    provider = ModelStatusProvider()
    assert provider.diff("id", STATE, {**STATUS_PROPS, "__provider": "other"}).changes is False
    changed = provider.diff("id", STATE, {**STATUS_PROPS, "deployment_revision": "def456"})
    assert changed.changes is True and changed.replaces == []
    unknown = provider.diff("id", STATE, {**STATUS_PROPS, "deployment_revision": UNKNOWN_INPUT})
    assert unknown.changes is True and unknown.replaces == []
    assert UNKNOWN_INPUT == "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def test_delete_touches_nothing(faked: FakeCluster) -> None:
    assert ModelStatusProvider().delete(f"{NS}/llama", dict(STATE)) is None
    assert faked.calls == []
