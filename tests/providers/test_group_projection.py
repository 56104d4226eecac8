"""Status of a multi-node model (providers/group_projection.py): groups of a LeaderWorkerSet, as
the LWS controller and its webhook label them (sigs.k8s.io/lws v0.8.0)."""

from __future__ import annotations

from typing import Optional

from providers.group_projection import GroupObservation, group_rollout_complete, groups_of, project_group_status
from providers.projection import ERROR, PENDING, READY, Observation
from tests.support.fakes import NOW, event, pod, ready_server_pod, ready_slices, unschedulable

LWS = "llama"


def lws(replicas: int = 1, ready: int = 0, updated: Optional[int] = None) -> dict:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": LWS, "generation": 1},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2}},
            "status": {"replicas": replicas, "readyReplicas": ready,
                       "updatedReplicas": replicas if updated is None else updated}}


def grouped(item: dict, group: int, worker: int) -> dict:
    item["metadata"]["labels"].update({"leaderworkerset.sigs.k8s.io/name": LWS,
                                       "leaderworkerset.sigs.k8s.io/group-index": str(group),
                                       "leaderworkerset.sigs.k8s.io/worker-index": str(worker)})
    return item


def leader(group: int = 0, ready: bool = True) -> dict:
    name = f"{LWS}-{group}"
    return grouped(ready_server_pod(name) if ready else pod(name), group, 0)


def worker(group: int = 0, index: int = 1, ready: bool = True) -> dict:
    name = f"{LWS}-{group}-{index}"
    return grouped(ready_server_pod(name) if ready else pod(name), group, index)


def observed(pods: list[dict], *, replicas: int = 1, ready_groups: int = 0, slices=None,
             events=None, the_lws: Optional[dict] = None) -> GroupObservation:
    core = Observation(model="llama", pods=pods, now=NOW, pending_timeout_seconds=300,
                       endpoint_slices=slices if slices is not None else ready_slices([f"{LWS}-0"]),
                       events=events or [])
    return GroupObservation("llama", LWS, 2, the_lws or lws(replicas, ready_groups), events or [], core)


def test_a_complete_group_with_its_leader_routable_is_ready():
    status = project_group_status(observed([leader(), worker()], ready_groups=1))
    assert status.state == READY and status.targets == [f"{LWS}-0"]
    assert status.message.startswith("serving: 1 routable leader(s), 1/1 groups of 2 pods ready")


def test_a_leader_whose_worker_is_not_ready_is_not_routable():
    status = project_group_status(observed([leader(), worker(ready=False)]))
    assert status.state == PENDING and status.targets == []
    assert "0/1 groups ready: group 0: 1/2 pods ready; not ready: llama-0-1" in status.message


def test_a_missing_worker_is_named_as_missing():
    status = project_group_status(observed([leader()]))
    assert status.state == PENDING
    assert "group 0: 1/2 pods ready; 1 pod(s) not created yet" in status.message


def test_a_worker_that_cannot_schedule_fails_with_its_pod_and_reason():
    stuck = grouped(pod(f"{LWS}-0-1", phase="Pending", age=600, conditions=unschedulable(
        "0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint.")), 0, 1)
    status = project_group_status(observed([leader(), stuck]))
    assert status.state == ERROR and status.reason == "insufficient-gpus"
    assert status.message.startswith(f"pod {LWS}-0-1 has been Pending for 600s: no node has enough free GPUs")
    assert status.details["groups"] == ["group 0: 1/2 pods ready; not ready: llama-0-1"]


def test_a_group_larger_than_the_nodes_fails_with_not_enough_nodes():
    stuck = grouped(pod(f"{LWS}-0-2", phase="Pending", age=600, conditions=unschedulable(
        "0/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "2 node(s) didn't match pod anti-affinity rules.")), 0, 2)
    status = project_group_status(observed([leader(), worker(), stuck]))
    assert status.state == ERROR and status.reason == "not-enough-nodes"
    assert f"pod {LWS}-0-2 has been Pending for 600s: no free node for another pod of its group" in status.message


def test_a_recreated_group_is_reported_while_it_comes_back_and_after():
    said = f"Worker pod {LWS}-0-1 failed, deleted leader pod {LWS}-0 to recreate group 0"
    events = [event(LWS, "RecreateGroupOnPodRestart", said, kind="LeaderWorkerSet", type_="Normal")]
    coming = project_group_status(observed([leader(ready=False)], events=events, slices=[]))
    assert coming.state == PENDING and coming.reason == "group-recreating"
    assert said in coming.message and coming.details["recreated"] == [said]
    back = project_group_status(observed([leader(), worker()], ready_groups=1, events=events))
    assert back.state == READY and back.message.endswith(f"recreated by the LWS controller: {said}")


def test_other_pods_of_the_model_are_not_grouped():
    stray = pod("llama-puller-abc", component="weights-puller")
    assert [g.index for g in groups_of(observed([leader(), worker(), stray]))] == ["0"]


def test_the_rollout_is_whole_only_when_every_group_is():
    two = [leader(0), worker(0), leader(1), worker(1, ready=False)]
    seen = observed(two, replicas=2, ready_groups=1)
    assert not group_rollout_complete(seen.leader_worker_set, groups_of(seen))
    seen = observed([leader(0), worker(0), leader(1), worker(1)], replicas=2, ready_groups=2)
    assert group_rollout_complete(seen.leader_worker_set, groups_of(seen))
    stale = observed([leader(0), worker(0), leader(1), worker(1)], the_lws=lws(2, 2, updated=1))
    assert not group_rollout_complete(stale.leader_worker_set, groups_of(stale))


def test_without_the_lws_the_weights_states_apply():
    seen = observed([])
    seen.leader_worker_set = None
    status = project_group_status(seen)
    assert status.state == PENDING and status.reason == "not-created"


def test_the_group_size_the_engine_records_as_a_float_reads_as_pods():
    from contract.props import StatusProps
    from providers.observe import observer_for

    props = {"namespace": "llm", "model": "llama", "leader_worker_set": "llama-lws", "service": "llama",
             "group_size": 2.0, "puller_job": "p", "lws_revision": "r"}
    observer = observer_for(StatusProps.from_dict(props))
    assert observer.group_size == 2 and isinstance(observer.group_size, int)
