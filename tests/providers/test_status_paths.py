"""One status table, run against both observers: the raw objects (vLLM, NIM raw) and the NIM
operator's custom resources. `pulumi up` waits for READY and a whole rollout, records the
targets of the finished rollout, stops at a replica stuck Pending while the model serves, and
fails fast with the classified reason: whichever way the model is served.

``wait_until_serving`` runs against the in-memory API of ``fakes.py`` with an injected clock. On
the operator path the test plays the operator: the NIMCache and NIMService say Ready, and the
Deployment and pods carry the names and the ``app`` label the operator gives them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from providers import kube
from providers.projection import READY
from providers.status import ModelNotServing, wait_until_serving
from tests.support.fakes import (
    DEPLOYMENT,
    NS,
    PULLER_JOB,
    SERVICE,
    FakeClock,
    FakeCluster,
    api_error,
    container_status,
    deployment,
    event,
    pod,
    protocol_error,
    ready_server_pod,
    ready_slices,
    unschedulable,
)

CACHE = f"{SERVICE}-cache-abc123"
SERVER = "llama-server-7d9f8c6b5-q2w3e"
SECOND = "llama-server-7d9f8c6b5-x8y9z"
COMMON = {"namespace": NS, "model": "llama", "endpoint_url": f"http://{SERVICE}.{NS}.svc.cluster.local:8000",
          "pending_timeout_seconds": 900, "ready_timeout_seconds": 60, "poll_seconds": 1, "kubeconfig": "", "context": ""}


@dataclass(frozen=True)
class Path:
    """How one path's objects look in the cluster, and the status props its component records."""

    name: str
    props: dict
    deployment: str
    operator: bool

    def put(self, cluster: FakeCluster, *objects: dict) -> FakeCluster:
        """Put the objects as this path's cluster shows them (the operator's names and labels)."""
        shaped = []
        for obj in objects:
            obj = copy.deepcopy(obj)
            if obj["kind"] == "Deployment":
                obj["metadata"]["name"] = self.deployment
            if obj["kind"] == "Pod" and self.operator:
                obj["metadata"]["labels"]["app"] = SERVICE  # the operator selects its pods by `app`
            shaped.append(obj)
        if self.operator:
            shaped += [{"kind": "nimcaches", "metadata": {"name": CACHE, "namespace": NS}, "status": {"state": "Ready"}},
                       {"kind": "nimservices", "metadata": {"name": SERVICE, "namespace": NS}, "status": {"state": "Ready"}}]
        return cluster.put(*shaped)


RAW = Path("raw", {**COMMON, "deployment": DEPLOYMENT, "service": SERVICE, "puller_job": PULLER_JOB,
                   "deployment_revision": "abc123"}, DEPLOYMENT, operator=False)
OPERATOR = Path("operator", {**COMMON, "nim_service": SERVICE, "nim_cache": CACHE, "service_revision": "abc123"},
                SERVICE, operator=True)


@pytest.fixture(params=[RAW, OPERATOR], ids=lambda p: p.name)
def path(request) -> Path:
    return request.param


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube.call, "__kwdefaults__", {**kube.call.__kwdefaults__, "sleep": lambda _: None})


def now() -> datetime:
    # wait_until_serving projects against the wall clock (pending timeouts): build pods relative to it.
    return datetime.now(UTC)


def wait(path: Path, cluster: FakeCluster, clock: FakeClock, **overrides):
    return wait_until_serving({**path.props, **overrides}, sleep=clock.sleep, clock=clock,
                              connect=lambda _target: cluster.clients())


def serving(path: Path, cluster: FakeCluster, **deployment_args) -> None:
    path.put(cluster, deployment(ready=1, **deployment_args), ready_server_pod(SERVER, now=now()), *ready_slices([SERVER]))


def test_ready_once_started_and_routable(path: Path) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    path.put(cluster, deployment(ready=0), pod(SERVER, now=now(), containers=[container_status(running=True)]))
    clock.on_sleep.append(lambda n: n == 3 and serving(path, cluster))

    status = wait(path, cluster, clock)

    assert (status.state, status.reason) == (READY, "ready") and status.targets == [SERVER]
    assert len(clock.sleeps) == 3


def test_ready_waits_for_the_rollout_to_complete(path: Path) -> None:
    """The old pod still serves while the controller has not acted on the new spec: not done yet."""
    cluster, clock = FakeCluster(), FakeClock()
    serving(path, cluster, generation=2, observed=1)
    clock.on_sleep.append(lambda n: n == 2 and path.put(cluster, deployment(ready=1, generation=2, updated=1, total=2)))
    clock.on_sleep.append(lambda n: n == 4 and path.put(cluster, deployment(ready=1, generation=2)))

    status = wait(path, cluster, clock)

    assert status.state == READY and "rollout" not in status.message
    assert len(clock.sleeps) == 4


def test_a_scale_up_records_every_replica_of_the_finished_rollout(path: Path) -> None:
    """READY at the first routable pod, but `up` returns only once the rollout is whole, and the
    recorded targets are every ready replica (the router's view of the finished rollout), not the
    ones of the read that first said READY."""
    cluster, clock = FakeCluster(), FakeClock()
    path.put(cluster, deployment(replicas=2, ready=1), ready_server_pod(SERVER, now=now()),
             pod(SECOND, now=now(), age=1, containers=[container_status(running=True)]), *ready_slices([SERVER]))
    clock.on_sleep.append(lambda n: n == 3 and path.put(
        cluster, deployment(replicas=2, ready=2), ready_server_pod(SECOND, now=now()), *ready_slices([SERVER, SECOND])))

    status = wait(path, cluster, clock)

    assert status.state == READY and sorted(status.targets) == sorted([SERVER, SECOND])
    assert status.ready_replicas == 2
    assert len(clock.sleeps) == 3


def test_the_recorded_targets_come_from_the_read_that_saw_the_rollout_whole(path: Path) -> None:
    """The second replica turns ready between the read that says READY and the read that finds
    the rollout complete: the record holds both (the later read), not the earlier one's target."""
    cluster, clock = FakeCluster(), FakeClock()
    path.put(cluster, deployment(replicas=2, ready=1), ready_server_pod(SERVER, now=now()),
             pod(SECOND, now=now(), age=1, containers=[container_status(running=True)]), *ready_slices([SERVER]))
    cluster.when("read_namespaced_deployment", 2, lambda c: path.put(
        c, deployment(replicas=2, ready=2), ready_server_pod(SECOND, now=now()), *ready_slices([SERVER, SECOND])))

    status = wait(path, cluster, clock)

    assert sorted(status.targets) == sorted([SERVER, SECOND]) and status.ready_replicas == 2
    assert clock.sleeps == []


def test_a_replica_pending_past_the_timeout_stops_the_up_while_the_model_serves(path: Path) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    stuck = "llama-server-7d9f8c6b5-stuck"
    path.put(cluster, deployment(replicas=2, ready=1), ready_server_pod(SERVER, now=now()), *ready_slices([SERVER]),
             pod(stuck, phase="Pending", age=120, now=now(), conditions=unschedulable(
                 "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")),
             event(stuck, "FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", now=now()))

    with pytest.raises(ModelNotServing) as raised:
        wait(path, cluster, clock, pending_timeout_seconds=60)

    message = str(raised.value)
    assert f"pod {stuck} has been Pending" in message and "reason: insufficient-gpus" in message
    assert clock.sleeps == []


def test_a_crash_loop_fails_fast_with_reason_and_log_tail(path: Path) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    path.put(cluster, deployment(ready=0), pod(SERVER, now=now(), containers=[container_status(
        restarts=3, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})]),
        event(SERVER, "BackOff", "Back-off restarting failed container server in pod"))
    cluster.logs[SERVER] = "INFO loading\nKeyError: 'getpwuid(): uid not found: 1001'\n"

    with pytest.raises(ModelNotServing) as raised:
        wait(path, cluster, clock)

    message = str(raised.value)
    assert message.startswith("model llama is ERROR:") and SERVER in message
    assert "reason: uid-unknown" in message
    assert f"log tail of {SERVER}:" in message and "getpwuid(): uid not found: 1001" in message
    assert "recent events:" in message and "BackOff: Back-off restarting failed container" in message
    assert clock.sleeps == []  # the first read that sees it fails the up


def test_an_oom_kill_fails_fast(path: Path) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    path.put(cluster, deployment(ready=0), pod(SERVER, now=now(), containers=[container_status(
        restarts=1, running=True, last_terminated={"exitCode": 137, "reason": "OOMKilled"})]))
    with pytest.raises(ModelNotServing, match="reason: oom-killed"):
        wait(path, cluster, clock)


def test_an_image_that_cannot_be_pulled_fails_fast(path: Path) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    # A definitive answer from the registry (the image does not exist): a retry cannot help.
    path.put(cluster, deployment(ready=0), pod(SERVER, now=now(), containers=[container_status(
        waiting={"reason": "ErrImagePull", "message": 'failed to pull and unpack image "nvcr.io/x:1": '
                 'failed to resolve reference "nvcr.io/x:1": nvcr.io/x:1: not found'})]))
    with pytest.raises(ModelNotServing, match="reason: image-pull"):
        wait(path, cluster, clock)
    assert clock.sleeps == []


def test_pending_too_long_is_an_error_not_a_timeout(path: Path) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    path.put(cluster, deployment(ready=0), pod(SERVER, phase="Pending", now=now(), age=1000, conditions=unschedulable(
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")))
    with pytest.raises(ModelNotServing, match="reason: insufficient-gpus"):
        wait(path, cluster, clock)
    assert clock.sleeps == []


def test_unknown_reads_are_retried_until_they_succeed(path: Path, no_backoff: None) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    serving(path, cluster)
    cluster.fail("list_namespaced_pod", lambda: api_error(403), times=2)
    cluster.fail("read_namespaced_deployment", protocol_error, times=kube.MAX_ATTEMPTS)  # one whole unreachable read

    status = wait(path, cluster, clock)

    assert status.state == READY
    assert len(clock.sleeps) == 3


def test_unknown_until_the_deadline_times_out_with_the_last_status(path: Path, no_backoff: None) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    serving(path, cluster)
    cluster.fail_always("list_namespaced_endpoint_slice", lambda: api_error(503))

    with pytest.raises(ModelNotServing) as raised:
        wait(path, cluster, clock, ready_timeout_seconds=30, poll_seconds=5)

    message = str(raised.value)
    assert "not serving after 30s" in message and "UNKNOWN: status could not be read" in message
    assert 30 <= sum(clock.sleeps) <= 35


def test_pending_until_the_deadline_times_out_with_the_last_status(path: Path) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    path.put(cluster, deployment(ready=0), pod(SERVER, phase="Pending", now=now(), age=5,
                                               containers=[container_status(waiting={"reason": "ContainerCreating"})]))
    with pytest.raises(ModelNotServing, match=r"not serving after 60s: PENDING: "):
        wait(path, cluster, clock)
    assert 60 <= sum(clock.sleeps) <= 61


def test_a_stuck_rollout_times_out_saying_so(path: Path) -> None:
    cluster, clock = FakeCluster(), FakeClock()
    serving(path, cluster, generation=3, observed=3, updated=0, total=2)
    with pytest.raises(ModelNotServing, match=r"READY: .*\(rollout in progress\)"):
        wait(path, cluster, clock)
