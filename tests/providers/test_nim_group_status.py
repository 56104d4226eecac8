"""Status of a multi-node NIM model (operator path, ``multiNode``): the NIMService's state, then the
groups of the LeaderWorkerSet the operator renders (``<name>-lws``, k8s-nim-operator v3.1.2), read
by the group projection the vLLM multi-node path uses (providers/group_projection.py).

Pure projection first (``project_nim_status`` on a ``NimObservation`` carrying a group), then the
operator observer against a fake API: what it reads (the LWS by name, the pods by the label the LWS
controller puts on every pod of the set, the Service's EndpointSlices, the LWS's events) and the
rollout it waits for.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

from kubernetes.client.exceptions import ApiException

from contract.props import StatusProps
from providers import kube
from providers.group_projection import GroupObservation
from providers.nim_projection import NimObservation, project_nim_status
from providers.observe import OperatorRef, current_status, observer_for
from providers.projection import ERROR, PENDING, READY, Observation
from tests.support.fakes import NOW, container_status, event, pod, ready_server_pod, ready_slices, unschedulable

NS, SERVICE, CACHE = "llm", "r1", "r1-cache-abc123"
LWS = f"{SERVICE}-lws"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


def lws(replicas: int = 1, ready: int = 0) -> dict:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": LWS, "generation": 1},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2}},
            "status": {"replicas": replicas, "readyReplicas": ready, "updatedReplicas": replicas}}


def grouped(item: dict, group: int, worker: int) -> dict:
    # What the LWS controller and its webhook label every pod with; the operator adds `app` and its
    # NIMService labels on leaders only, which the status does not need.
    item["metadata"]["labels"].update({NAME_LABEL: LWS, "leaderworkerset.sigs.k8s.io/group-index": str(group),
                                       "leaderworkerset.sigs.k8s.io/worker-index": str(worker)})
    return item


def leader(group: int = 0, ready: bool = True) -> dict:
    name = f"{LWS}-{group}"
    return grouped(ready_server_pod(name) if ready else pod(name), group, 0)


def worker(group: int = 0, ready: bool = True) -> dict:
    name = f"{LWS}-{group}-1"
    return grouped(ready_server_pod(name) if ready else pod(name), group, 1)


def nim_cr(kind: str, name: str, state: str, conditions: Optional[list] = None) -> dict:
    return {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": kind, "metadata": {"name": name},
            "status": {"state": state, "conditions": conditions or []}}


def seen(pods: list[dict], *, state: str = "Ready", the_lws: Optional[dict] = ..., slices=None,
         events=None) -> NimObservation:
    core = Observation(model=SERVICE, pods=pods, now=NOW, pending_timeout_seconds=300,
                       endpoint_slices=slices if slices is not None else ready_slices([f"{LWS}-0"]),
                       events=events or [])
    group = GroupObservation(SERVICE, LWS, 2, lws(1, 1) if the_lws is ... else the_lws, events or [], core)
    return NimObservation(SERVICE, SERVICE, CACHE, nim_cr("NIMService", SERVICE, state),
                          nim_cr("NIMCache", CACHE, "Ready"), core, group)


# --- the projection -----------------------------------------------------------------------------

def test_ready_when_the_operator_says_ready_and_a_whole_group_has_its_leader_routable():
    status = project_nim_status(seen([leader(), worker()]))
    assert status.state == READY and status.targets == [f"{LWS}-0"]
    assert status.message.startswith("serving: 1 routable leader(s), 1/1 groups of 2 pods ready")


def test_a_leader_without_its_ready_worker_is_no_target_even_when_the_operator_says_ready():
    status = project_nim_status(seen([leader(), worker(ready=False)]))
    assert status.state == PENDING and status.targets == []
    assert status.reason == "no-targets"


def test_while_the_operator_says_not_ready_the_groups_are_described():
    status = project_nim_status(seen([leader(), worker(ready=False)], state="NotReady", the_lws=lws(1, 0)))
    assert status.state == PENDING
    assert "0/1 groups ready: group 0: 1/2 pods ready; not ready: r1-lws-0-1" in status.message
    assert status.details["groups"] == ["group 0: 1/2 pods ready; not ready: r1-lws-0-1"]
    assert status.details["nimService"] == SERVICE  # the operator's side is kept beside the groups


def test_before_the_operator_created_its_leader_worker_set():
    status = project_nim_status(seen([], state="NotReady", the_lws=None))
    assert status.state == PENDING and status.reason == "starting"
    assert "has not created its LeaderWorkerSet yet" in status.message


def test_a_worker_that_cannot_schedule_is_the_error_with_its_pod_and_reason():
    stuck = grouped(pod(f"{LWS}-0-1", phase="Pending", age=600, conditions=unschedulable(
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")), 0, 1)
    status = project_nim_status(seen([leader(), stuck], state="NotReady", the_lws=lws(1, 0)))
    assert status.state == ERROR and status.reason == "insufficient-gpus" and status.pod == f"{LWS}-0-1"
    assert status.message.startswith(f"pod {LWS}-0-1 has been Pending for 600s: no node has enough free GPUs")


def test_a_crash_looping_worker_is_the_error():
    looping = grouped(pod(f"{LWS}-0-1", containers=[container_status(
        restarts=9, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})]), 0, 1)
    status = project_nim_status(seen([leader(), looping], state="NotReady", the_lws=lws(1, 0)))
    assert status.state == ERROR and status.reason == "crash-loop" and status.pod == f"{LWS}-0-1", status
    assert f"pod {LWS}-0-1 keeps crashing" in status.message


def test_a_recreated_group_is_reported_while_it_comes_back_and_after():
    said = f"Worker pod {LWS}-0-1 failed, deleted leader pod {LWS}-0 to recreate group 0"
    events = [event(LWS, "RecreateGroupOnPodRestart", said, kind="LeaderWorkerSet", type_="Normal")]
    coming = project_nim_status(seen([leader(ready=False)], state="NotReady", the_lws=lws(1, 0), events=events,
                                     slices=[]))
    assert coming.state == PENDING and coming.reason == "group-recreating" and said in coming.message
    back = project_nim_status(seen([leader(), worker()], events=events))
    assert back.state == READY and back.message.endswith(f"recreated by the LWS controller: {said}")


def test_the_operators_failure_still_wins():
    failed = seen([leader(), worker()], state="Failed")
    failed.service["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "LeaderWorkerSetFailed",
                                               "message": "no matches for kind LeaderWorkerSet"}]
    status = project_nim_status(failed)
    assert status.state == ERROR and status.reason == "leader-worker-set-failed"


# --- the observer -------------------------------------------------------------------------------

class Cluster:
    """The NIM custom objects, the operator's LWS, the pods and EndpointSlices; records what is read."""

    def __init__(self, pods: list[dict], the_lws: Optional[dict]):
        self.objects = {("nimcaches", CACHE): nim_cr("NIMCache", CACHE, "Ready"),
                        ("nimservices", SERVICE): nim_cr("NIMService", SERVICE, "Ready"),
                        ("leaderworkersets", LWS): the_lws}
        self.pods, self.reads = pods, []

    def clients(self) -> kube.Clients:
        cluster = self

        class Custom:
            def get_namespaced_custom_object(self, group, version, namespace, plural, name):
                cluster.reads.append((group, plural, name))
                found = cluster.objects.get((plural, name))
                if found is None:
                    raise ApiException(status=404, reason="Not Found")
                return found

        class Apps:
            def read_namespaced_deployment(self, name, namespace):
                raise AssertionError("a multi-node NIMService has no Deployment to read")

        class Core:
            def list_namespaced_pod(self, namespace, label_selector=""):
                cluster.reads.append(("pods", label_selector))
                return SimpleNamespace(items=cluster.pods)

            def list_namespaced_event(self, namespace, field_selector=""):
                cluster.reads.append(("events", field_selector))
                return SimpleNamespace(items=[])

            def read_namespaced_pod_log(self, name, namespace, tail_lines=40, container="", previous=False):
                return ""

        class Discovery:
            def list_namespaced_endpoint_slice(self, namespace, label_selector=""):
                cluster.reads.append(("slices", label_selector))
                return SimpleNamespace(items=ready_slices([f"{LWS}-0"]))

        return kube.Clients(core=Core(), apps=Apps(), batch=None, discovery=Discovery(), custom=Custom())


PROPS = {"namespace": NS, "model": SERVICE, "nim_service": SERVICE, "nim_cache": CACHE, "service_revision": "r",
         "leader_worker_set": LWS, "group_size": 2.0, "pending_timeout_seconds": 300}


def test_the_recorded_props_pick_the_operator_observer_with_its_leader_worker_set():
    observer = observer_for(StatusProps.from_dict(PROPS))
    assert isinstance(observer, OperatorRef)
    assert (observer.leader_worker_set, observer.group_size) == (LWS, 2) and isinstance(observer.group_size, int)


def test_the_observer_reads_the_operators_lws_its_pods_and_events_and_reports_ready():
    cluster = Cluster([leader(), worker()], lws(1, 1))
    observer = observer_for(StatusProps.from_dict(PROPS))
    status = current_status(cluster.clients(), observer, NOW)
    assert status.state == READY, status
    assert ("leaderworkerset.x-k8s.io", "leaderworkersets", LWS) in cluster.reads
    assert ("pods", f"{NAME_LABEL}={LWS}") in cluster.reads  # workers carry no NIMService label
    assert ("slices", f"kubernetes.io/service-name={SERVICE}") in cluster.reads  # the operator's Service
    assert ("events", f"involvedObject.name={LWS}") in cluster.reads
    assert observer.complete(observer.observe(cluster.clients(), NOW))


def test_the_rollout_is_not_whole_until_every_group_is():
    cluster = Cluster([leader(0), worker(0), leader(1), worker(1, ready=False)], lws(2, 1))
    observer = observer_for(StatusProps.from_dict(PROPS))
    observed = observer.observe(cluster.clients(), NOW)
    assert observer.project(observed).state == READY  # one whole group serves
    assert not observer.complete(observed)


def test_a_missing_lws_while_the_operator_reconciles_is_pending():
    cluster = Cluster([], None)
    cluster.objects[("nimservices", SERVICE)] = nim_cr("NIMService", SERVICE, "NotReady")
    status = current_status(cluster.clients(), observer_for(StatusProps.from_dict(PROPS)), NOW)
    assert status.state == PENDING and "LeaderWorkerSet" in status.message


def test_an_evicted_worker_is_named_with_the_kubelets_reason():
    evicted = grouped(pod(f"{LWS}-0-1", phase="Failed"), 0, 1)
    evicted["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    status = project_nim_status(seen([leader(), evicted], state="NotReady", the_lws=lws(1, 0), slices=[]))
    assert status.state == PENDING and status.reason == "pod-evicted", status
    assert f"evicted: {LWS}-0-1: The node was low on resource: memory." in status.message
