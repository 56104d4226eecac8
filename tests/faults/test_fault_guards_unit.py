"""The guards the fault suite found missing, without a cluster (the in-memory API of
tests/support/fakes.py): the gate re-runs a puller whose outcome cannot stand for the weights,
and the status waits again on `up` when its record is not READY.

The end-to-end cases are test_fault_puller.py (a reported failure is re-run) and
test_fault_drift.py (a re-created volume is re-pulled; the status after refresh + up is READY).
"""

from __future__ import annotations

import copy

import pytest

from providers import gate, kube
from providers.gate import FAILURE_REPORTED, WeightsGateProvider, WeightsNotReady
from providers.projection import ERROR, PENDING, READY, UNKNOWN
from providers.status import ModelStatusProvider
from tests.support.fakes import CLAIM, NS, PULLER_JOB, SOURCE, FakeBatch, FakeCluster, job, pod, pvc

pytestmark = [pytest.mark.faults, pytest.mark.unit]  # fakes only: no cluster (tests/tiers.py)

PULUMI = "pulumi-kubernetes-63dae65c"
PROPS = {"namespace": NS, "model": "llama", "weights_claim": CLAIM, "puller_job": PULLER_JOB, "model_source": SOURCE,
         "deadline_seconds": 30, "poll_seconds": 0.001, "kubeconfig": "", "context": ""}


def live_job(state: str, *, created: str = "2025-06-01T11:00:00Z", reported: bool = False) -> dict:
    """A Job as the API server returns it: what Pulumi applied, plus defaults and generated fields."""
    obj = job(state=state)
    meta = obj["metadata"]
    meta.update(uid="old-uid", creationTimestamp=created, resourceVersion="42", generation=1)
    meta["labels"]["app.kubernetes.io/part-of"] = "llm-serving"
    meta["annotations"]["pulumi.com/skipAwait"] = "true"
    if reported:
        meta["annotations"][FAILURE_REPORTED] = "puller-failed"
    template = obj["spec"]["template"]
    template["metadata"] = {"labels": {"app.kubernetes.io/component": "weights-puller", "controller-uid": "old-uid",
                                       "batch.kubernetes.io/controller-uid": "old-uid", "job-name": PULLER_JOB}}
    container = template["spec"]["containers"][0]
    container.update(args=["download", "acme/x"], env=[{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
                     terminationMessagePath="/dev/termination-log", imagePullPolicy="IfNotPresent")
    obj["spec"].update(completionMode="NonIndexed", completions=1, parallelism=1, suspend=False,
                       selector={"matchLabels": {"batch.kubernetes.io/controller-uid": "old-uid"}})
    meta["managedFields"] = [
        {"manager": PULUMI, "operation": "Apply", "apiVersion": "batch/v1", "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:annotations": {"f:llm-serving.dev/model-source": {}, "f:pulumi.com/skipAwait": {}},
                           "f:labels": {f"f:{k}": {} for k in meta["labels"]}},
            "f:spec": {"f:backoffLimit": {}, "f:template": {
                "f:metadata": {"f:labels": {"f:app.kubernetes.io/component": {}}},
                "f:spec": {"f:restartPolicy": {}, "f:containers": {'k:{"name":"puller"}': {
                    ".": {}, "f:name": {}, "f:image": {}, "f:command": {}, "f:args": {},
                    "f:env": {'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}},
                              'k:{"name":"B"}': {".": {}, "f:name": {}, "f:value": {}}}}}}}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
         "apiVersion": "batch/v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}},
    ]
    return obj


class Batch(FakeBatch):
    """FakeBatch plus the two writes the gate makes: a merge patch (the mark) and an apply."""

    def patch_namespaced_job(self, name, namespace, body, **kwargs):
        self.cluster._enter("patch_namespaced_job", (name, namespace), kwargs)
        current = self.cluster.get("Job", name, namespace)
        if kwargs.get("_content_type") == "application/apply-patch+yaml":
            created = copy.deepcopy(body)
            created["metadata"].update(uid="new-uid", creationTimestamp="2025-06-01T12:00:00Z")
            created["status"] = job(state="running")["status"]
            self.cluster.put(created)
            self.cluster.applied = (kwargs, body)  # type: ignore[attr-defined]
            return self.cluster.typed(created, "V1Job")
        current["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
        return self.cluster.typed(current, "V1Job")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = FakeCluster().put(pvc())
    fake.objects["PersistentVolumeClaim"][(NS, CLAIM)]["metadata"]["creationTimestamp"] = "2025-06-01T10:59:59Z"

    def clients() -> kube.Clients:
        made = FakeCluster.clients(fake)
        made.batch = Batch(fake)
        return made

    monkeypatch.setattr(kube, "connect", lambda _target: clients())
    monkeypatch.setattr(gate, "HANDOFF_TIMEOUT_SECONDS", 2)
    return fake


def succeed(fake: FakeCluster) -> None:
    fake.get("Job", PULLER_JOB)["status"] = job(state="succeeded")["status"]


def puller(phase: str) -> dict:
    return pod(f"{PULLER_JOB}-abcde", component="weights-puller", phase=phase, job=PULLER_JOB)


def test_applied_manifest_is_exactly_what_pulumi_applied() -> None:
    manager, body = gate.applied_manifest(live_job("failed", reported=True))
    assert manager == PULUMI
    assert body["metadata"]["annotations"] == {"llm-serving.dev/model-source": SOURCE, "pulumi.com/skipAwait": "true"}
    assert set(body["spec"]) == {"backoffLimit", "template"}  # no selector, no defaults, no status
    template = body["spec"]["template"]
    assert template["metadata"] == {"labels": {"app.kubernetes.io/component": "weights-puller"}}
    container = template["spec"]["containers"][0]
    assert set(container) == {"name", "image", "command", "args", "env"}
    assert [e["name"] for e in container["env"]] == ["B", "A"]  # list order is the live order
    assert "status" not in body and "uid" not in body["metadata"]


def test_a_first_failure_is_reported_marked_and_kept(cluster: FakeCluster) -> None:
    cluster.put(live_job("failed"), puller("Failed"))
    with pytest.raises(WeightsNotReady, match="reason: puller-failed"):
        WeightsGateProvider().create(dict(PROPS))
    assert cluster.get("Job", PULLER_JOB)["metadata"]["annotations"][FAILURE_REPORTED] == "puller-failed"
    assert cluster.count("delete_namespaced_job") == 0


def test_a_reported_failure_is_re_run_by_the_next_up(cluster: FakeCluster) -> None:
    cluster.put(live_job("failed", reported=True), puller("Failed"))
    cluster.when("read_namespaced_job", 4, succeed)
    result = WeightsGateProvider().create(dict(PROPS))
    assert result.outs["weights_ready"] is True
    assert cluster.count("delete_namespaced_job") == 1
    kwargs, body = cluster.applied  # type: ignore[attr-defined]
    assert kwargs["field_manager"] == PULUMI and kwargs["force"] is True
    assert FAILURE_REPORTED not in body["metadata"]["annotations"]
    assert cluster.get("Job", PULLER_JOB)["metadata"]["uid"] == "new-uid"


def test_a_job_older_than_its_volume_is_re_run(cluster: FakeCluster) -> None:
    cluster.put(live_job("succeeded", created="2025-06-01T09:00:00Z"))  # the volume is from 10:59:59
    cluster.when("read_namespaced_job", 4, succeed)
    WeightsGateProvider().create(dict(PROPS))
    assert cluster.count("delete_namespaced_job") == 1
    assert cluster.get("Job", PULLER_JOB)["metadata"]["uid"] == "new-uid"


def test_a_job_that_ran_on_this_volume_stands(cluster: FakeCluster) -> None:
    cluster.put(live_job("succeeded"))
    WeightsGateProvider().create(dict(PROPS))
    assert cluster.count("delete_namespaced_job") == 0 and cluster.count("patch_namespaced_job") == 0


@pytest.mark.parametrize("state, changes", [(READY, False), (PENDING, True), (ERROR, True), (UNKNOWN, True)])
def test_a_status_record_that_is_not_ready_is_checked_again(state: str, changes: bool) -> None:
    props = {"namespace": NS, "model": "llama", "deployment_revision": "abc"}
    olds = {**props, "state": state, "message": "m", "reason": "r", "__provider": "x"}
    assert ModelStatusProvider().diff("id", olds, dict(props)).changes is changes
