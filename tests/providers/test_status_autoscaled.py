"""The status wait of an autoscaled model (status props with ``min_replicas``).

The Deployment's replica count is the autoscaler's: `up` returns once every pod runs the current
spec and ``autoscaling.minReplicas`` of them are ready; it waits below that floor (the autoscaler
has not raised the count yet) and while an old pod is left, and it does not wait for replicas the
autoscaler added for load. A model without ``min_replicas`` keeps waiting for every replica of the
Deployment's spec (tests/providers/test_status_paths.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contract.props import StatusProps
from providers.projection import READY, SCALED_TO_ZERO, rollout_complete
from providers.status import ModelNotServing
from tests.support.fakes import (
    SERVER,
    STATUS_PROPS,
    FakeClock,
    FakeCluster,
    container_status,
    deployment,
    pod,
    ready_server_pod,
    ready_slices,
    wait_serving,
)

SECOND = "llama-server-7d9f8c6b5-x8y9z"


def now() -> datetime:
    return datetime.now(UTC)


def test_the_floor_is_min_replicas_not_the_autoscalers_count() -> None:
    scaled_up = deployment(replicas=3, ready=1)  # the autoscaler asked for 3; one is ready
    assert rollout_complete(scaled_up, min_replicas=1)
    assert not rollout_complete(scaled_up)  # a fixed count of 3 waits for all three
    assert not rollout_complete(scaled_up, min_replicas=2)


def test_below_the_floor_the_wait_goes_on_even_when_the_spec_is_met() -> None:
    # Just created: the Deployment defaults to 1 until the autoscaler raises it to minReplicas.
    assert rollout_complete(deployment(replicas=1, ready=1))
    assert not rollout_complete(deployment(replicas=1, ready=1), min_replicas=2)


def test_an_old_pod_or_an_unobserved_spec_is_not_a_whole_rollout() -> None:
    assert not rollout_complete(deployment(replicas=2, ready=2, updated=1, total=3), min_replicas=1)
    assert not rollout_complete(deployment(replicas=2, ready=2, generation=2, observed=1), min_replicas=1)
    assert rollout_complete(deployment(replicas=2, ready=2, generation=2), min_replicas=1)


def test_up_returns_at_the_floor_while_a_scale_up_replica_still_loads() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(replicas=2, ready=1), ready_server_pod(SERVER, now=now()),
                pod(SECOND, now=now(), age=1, containers=[container_status(running=True)]), *ready_slices([SERVER]))

    status = wait_serving(cluster, clock, min_replicas=1)

    assert status.state == READY and status.targets == [SERVER]
    assert clock.sleeps == []


def test_up_waits_for_the_autoscaler_to_reach_the_floor() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(replicas=1, ready=1), ready_server_pod(SERVER, now=now()), *ready_slices([SERVER]))
    clock.on_sleep.append(lambda n: n == 2 and cluster.put(
        deployment(replicas=2, ready=2), ready_server_pod(SECOND, now=now()), *ready_slices([SERVER, SECOND])))

    status = wait_serving(cluster, clock, min_replicas=2)

    assert status.state == READY and sorted(status.targets) == sorted([SERVER, SECOND])
    assert len(clock.sleeps) == 2


def test_min_replicas_travels_in_the_status_props_only_when_set() -> None:
    assert "min_replicas" not in StatusProps.from_dict(STATUS_PROPS).to_dict()
    assert StatusProps.from_dict({**STATUS_PROPS, "min_replicas": 2}).min_replicas == 2


def test_a_wait_below_the_floor_says_the_autoscaler_has_not_acted() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(replicas=1, ready=1), ready_server_pod(SERVER, now=now()), *ready_slices([SERVER]))

    with pytest.raises(ModelNotServing) as raised:
        wait_serving(cluster, clock, min_replicas=2, ready_timeout_seconds=3)

    message = str(raised.value)
    assert "asks for 1 replica(s), below autoscaling.minReplicas 2" in message and "is KEDA running" in message
    # A fixed count that is not reached says only that the rollout is in progress.
    cluster.put(deployment(replicas=2, ready=1))
    with pytest.raises(ModelNotServing) as fixed:
        wait_serving(cluster, FakeClock(), ready_timeout_seconds=3)
    assert str(fixed.value).endswith("(rollout in progress)")


# --- minReplicas: 0 ------------------------------------------------------------------------------

def test_a_model_that_may_sleep_is_scaled_to_zero_not_failing_and_up_does_not_wake_it() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(replicas=0, ready=0))

    status = wait_serving(cluster, clock, min_replicas=0)

    assert status.state == SCALED_TO_ZERO and status.reason == "scaled-to-zero" and status.targets == []
    assert "the gateway holds its next request" in status.message
    assert clock.sleeps == []


def test_a_model_that_may_not_sleep_at_zero_is_still_waited_for() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(replicas=0, ready=0))
    with pytest.raises(ModelNotServing) as raised:
        wait_serving(cluster, clock, min_replicas=1, ready_timeout_seconds=3)
    assert "scaled to zero replicas" in str(raised.value)


def test_a_model_waking_up_is_waited_for_until_it_serves() -> None:
    cluster, clock = FakeCluster(), FakeClock()
    cluster.put(deployment(replicas=1, ready=0), pod(SERVER, now=now(), age=1, containers=[container_status(running=True)]))
    clock.on_sleep.append(lambda n: n == 2 and cluster.put(
        deployment(replicas=1, ready=1), ready_server_pod(SERVER, now=now()), *ready_slices([SERVER])))

    status = wait_serving(cluster, clock, min_replicas=0)

    assert status.state == READY and status.targets == [SERVER]


def test_a_sleeping_model_is_not_re_read_by_every_up() -> None:
    from providers.status import status_diff

    olds = {**STATUS_PROPS, "min_replicas": 0, "state": SCALED_TO_ZERO}
    assert not status_diff(olds, {**STATUS_PROPS, "min_replicas": 0}).changes
    assert status_diff({**olds, "state": "PENDING"}, {**STATUS_PROPS, "min_replicas": 0}).changes
