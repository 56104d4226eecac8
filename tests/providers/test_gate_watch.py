"""The weights gate waits on a watch of its puller Job, not a poll: the Job's completion event ends
the wait at once (no read after it), an expired version (410) is read again and watched from the
fresh version (after a poll interval), a stream ended by its timeout is watched again after the
pod check, a failure event goes to the diagnosis, and a watch that is refused or cut falls back to
polling. The hand-off then lists the pods again at once instead of sleeping after deleting them.

The fake API (``fakes.py``) streams the API server's newline-delimited events in small chunks; its
``watch_clock`` makes a stream that runs to its timeout take that long on the injected clock.
"""

from __future__ import annotations

import json

import pytest

from contract.props import GateProps
from providers import gate, kube
from providers.gate import WeightsGateProvider, WeightsNotReady
from providers.projection import job_succeeded
from tests.support.fakes import NS, PULLER_JOB, FakeClock, FakeCluster, api_error, container_status, job, pod, pvc

PULLER_POD = f"{PULLER_JOB}-x7k2p"
PROPS = {"namespace": NS, "model": "llama", "weights_claim": "llama-weights-1a2b3c4d", "puller_job": PULLER_JOB,
         "model_source": "meta-llama/Llama-3.1-8B-Instruct@main", "deadline_seconds": 600, "poll_seconds": 0.5,
         "kubeconfig": "", "context": ""}
GATE = GateProps.from_dict(PROPS)
EXPIRED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": "too old resource version: 101 (4242)", "reason": "Expired", "code": 410}


def versioned(state: str, version: str) -> dict:
    obj = job(state=state)
    obj["metadata"]["resourceVersion"] = version
    return obj


def puller_pod(phase: str = "Succeeded") -> dict:
    return pod(PULLER_POD, component="weights-puller", phase=phase, job=PULLER_JOB,
               containers=[container_status("puller", terminated={"exitCode": 0, "reason": "Completed"})])


def setup(*objs: dict) -> tuple[FakeCluster, FakeClock]:
    cluster, clock = FakeCluster().put(pvc(), *objs), FakeClock()
    cluster.watch_clock = clock
    return cluster, clock


def wait(cluster: FakeCluster, clock: FakeClock) -> dict:
    return gate.wait_for_job(cluster.clients(), GATE, sleep=clock.sleep, clock=clock, rerun=False)


def test_the_completion_event_ends_the_wait_without_another_read() -> None:
    cluster, clock = setup(versioned("running", "5"))
    cluster.stream(("MODIFIED", versioned("running", "6")), ("MODIFIED", versioned("succeeded", "7")))

    finished = wait(cluster, clock)

    assert job_succeeded(finished) and finished["metadata"]["resourceVersion"] == "7"
    assert cluster.count("read_namespaced_job") == 1 and cluster.count("watch_namespaced_job") == 1
    watch = cluster.calls[[m for m, _, _ in cluster.calls].index("watch_namespaced_job")][2]
    # One object, from the version the read returned, ended by the server before the pod check is due.
    assert watch["field_selector"] == f"metadata.name={PULLER_JOB}" and watch["resource_version"] == "5"
    assert watch["timeout_seconds"] == gate.POD_CHECK_SECONDS and watch["_preload_content"] is False
    assert clock.sleeps == [] and clock.now == 1000.0  # no poll interval anywhere
    assert cluster.watches[0].closed and cluster.watches[0].released


def test_an_expired_version_is_read_again_and_watched_from_the_fresh_one() -> None:
    cluster, clock = setup(versioned("running", "101"))
    cluster.stream(lambda c: c.put(versioned("running", "4242")), ("ERROR", EXPIRED), lasts=1)
    cluster.stream(("MODIFIED", versioned("succeeded", "4243")))

    assert job_succeeded(wait(cluster, clock))
    assert cluster.count("read_namespaced_job") == 2
    versions = [kwargs["resource_version"] for m, _, kwargs in cluster.calls if m == "watch_namespaced_job"]
    assert versions == ["101", "4242"]
    # A version just read that is already expired is odd (the API's watch cache behind): read again
    # after one poll interval, never in a tight loop.
    assert clock.sleeps == [0.5]


def test_a_stream_ended_by_its_timeout_is_watched_again_after_the_pod_check() -> None:
    cluster, clock = setup(versioned("running", "5"), puller_pod("Running"))
    cluster.stream(("MODIFIED", versioned("running", "6")))  # then the server ends it at its timeout
    cluster.stream(("MODIFIED", versioned("succeeded", "8")))

    assert job_succeeded(wait(cluster, clock))
    assert [m for m, _, _ in cluster.calls] == [
        "read_namespaced_job", "watch_namespaced_job",          # 5 s without an outcome
        "read_namespaced_job", "list_namespaced_pod",           # read again; the pod check is due
        "watch_namespaced_job"]                                 # watch again: done
    assert clock.sleeps == [] and clock.now == 1000.0 + gate.POD_CHECK_SECONDS


def test_a_failure_event_is_diagnosed_with_the_pullers_log() -> None:
    cluster, clock = setup(versioned("running", "5"),
                           pod(PULLER_POD, component="weights-puller", phase="Failed", job=PULLER_JOB))
    cluster.logs[PULLER_POD] = "OSError: [Errno 28] No space left on device"
    cluster.stream(("MODIFIED", versioned("failed", "9")))

    with pytest.raises(WeightsNotReady, match="reason: disk-full"):
        wait(cluster, clock)
    assert cluster.count("read_namespaced_job") == 1


def test_a_deleted_job_is_read_again_and_reported_missing() -> None:
    cluster, clock = setup(versioned("running", "5"))
    cluster.stream(lambda c: c.remove("Job", PULLER_JOB), ("DELETED", versioned("running", "6")))

    with pytest.raises(WeightsNotReady, match="does not exist.*pulumi refresh"):
        wait(cluster, clock)


@pytest.mark.parametrize("refusal", [lambda: api_error(403), lambda: api_error(503)], ids=["no-watch-verb", "outage"])
def test_a_refused_watch_falls_back_to_polling(refusal) -> None:
    cluster, clock = setup(versioned("running", "5"))
    cluster.fail_always("watch_namespaced_job", refusal)
    cluster.when("read_namespaced_job", 3, lambda c: c.put(versioned("succeeded", "7")))

    assert job_succeeded(wait(cluster, clock))
    assert clock.sleeps == [0.5, 0.5] and cluster.count("read_namespaced_job") == 3


def test_a_stream_cut_at_once_waits_a_poll_interval_before_watching_again() -> None:
    cluster, clock = setup(versioned("running", "5"))
    cluster.stream(lasts=0).stream(lasts=0)
    cluster.when("read_namespaced_job", 3, lambda c: c.put(versioned("succeeded", "7")))

    assert job_succeeded(wait(cluster, clock))
    assert clock.sleeps == [0.5, 0.5]  # never a busy loop of reads and watches


def test_the_provider_hands_off_right_after_the_completion_event(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, _ = setup(versioned("running", "5"), puller_pod("Running"))
    cluster.watch_clock = None  # the provider runs on the real clock: a broken watch fails at the 2 s deadline
    monkeypatch.setattr(kube, "connect", lambda _target: cluster.clients())
    cluster.stream(lambda c: c.put(puller_pod("Succeeded")), ("MODIFIED", versioned("succeeded", "7")))

    result = WeightsGateProvider().create({**PROPS, "deadline_seconds": 2})

    assert result.outs["weights_ready"] is True and result.outs["completed_at"]
    assert cluster.deleted == [("Pod", PULLER_POD)] and cluster.names("Pod") == []
    # read + rerun check (the volume) + watch, then list, delete, list: no poll, no second read.
    assert [m for m, _, _ in cluster.calls] == [
        "read_namespaced_job", "read_namespaced_persistent_volume_claim", "watch_namespaced_job",
        "list_namespaced_pod", "delete_namespaced_pod", "list_namespaced_pod"]


def test_hand_off_lists_again_at_once_after_deleting() -> None:
    cluster, clock = setup(versioned("succeeded", "7"), puller_pod())
    assert gate.hand_off(cluster.clients(), GATE, sleep=clock.sleep, clock=clock) == 1
    assert cluster.count("list_namespaced_pod") == 2 and clock.sleeps == []


def test_watch_named_reads_chunked_events_and_releases_the_connection() -> None:
    cluster = FakeCluster()
    cluster.stream(("ADDED", versioned("running", "5")), ("BOOKMARK", {"metadata": {"resourceVersion": "6"}}),
                   ("ERROR", EXPIRED))
    clients = cluster.clients()

    events = list(kube.watch_named(clients, clients.batch.list_namespaced_job, PULLER_JOB, NS, "4", 2.5))

    assert [kind for kind, _ in events] == ["ADDED", "BOOKMARK", "ERROR"]
    assert events[0][1]["metadata"]["resourceVersion"] == "5" and events[2][1]["code"] == 410
    assert json.dumps(events[0][1]) == json.dumps(versioned("running", "5"))  # wire shape, untouched
    response = cluster.watches[0]
    assert response.kwargs["timeout_seconds"] == 2 and response.kwargs["allow_watch_bookmarks"] is True
    assert response.closed and response.released and clients.calls == 1
