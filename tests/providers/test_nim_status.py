"""Operator-path NIM models against a fake API: the CRD check (the shared ``RequiredCrdsProvider``
reading the props deployed stacks record), the operator observer, and what only this path has
(cache states). The wait itself is the shared one: ``test_status_paths.py`` runs its table on
both observers.

The fakes return wire-shape dicts (``kube.to_dict`` passes dicts through), so no real client is
built; errors are the real client's ``ApiException``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Optional

import pytest
from kubernetes.client.exceptions import ApiException

from contract.labels import NIM_CRD_NAMES as CRD_NAMES
from providers import crd_check, kube
from providers.crd_check import check_required
from providers.inputs import UNKNOWN_INPUT
from providers.nim_status import NimModelNotServing, NimOperatorCheckProvider, NimOperatorMissing, NimStatusProvider
from providers.observe import OperatorRef, current_status
from providers.status import wait_until_serving

REF = OperatorRef(namespace="llm", model="llama", nim_service="llama", nim_cache="llama-cache-abc123",
                  pending_timeout_seconds=300)


def missing_crds(clients, api):
    return crd_check.missing_crds(clients, api, [(name, "v1alpha1") for name in CRD_NAMES])


def observe_nim(clients, _props):
    return REF.observe(clients)


def current_nim_status(clients, _props):
    return current_status(clients, REF)

NS, SERVICE, CACHE = "llm", "llama", "llama-cache-abc123"
PROPS = {"namespace": NS, "model": SERVICE, "nim_service": SERVICE, "nim_cache": CACHE,
         "pending_timeout_seconds": 300, "ready_timeout_seconds": 60, "poll_seconds": 0,
         "kubeconfig": "", "context": ""}


def crd(name: str, served: bool = True, version: str = "v1alpha1") -> dict:
    return {"metadata": {"name": name}, "spec": {"versions": [{"name": version, "served": served, "storage": True}]}}


class FakeApiextensions:
    def __init__(self, crds: dict[str, Any]):
        self.crds = crds  # name -> dict, or an exception to raise
        self.reads: list[str] = []

    def read_custom_resource_definition(self, name: str):
        self.reads.append(name)
        value = self.crds.get(name, ApiException(status=404, reason="Not Found"))
        if isinstance(value, Exception):
            raise value
        return value


class FakeCluster:
    """Custom objects, a Deployment, pods and EndpointSlices; ``script`` changes them per read."""

    def __init__(self):
        self.objects: dict[tuple[str, str], Optional[dict]] = {}
        self.deployment: Optional[dict] = None
        self.pods: list[dict] = []
        self.slices: list[dict] = []
        self.selectors: list[str] = []
        self.script: list[Callable[[FakeCluster], None]] = []
        self.fail_with: Optional[Exception] = None

    def clients(self) -> kube.Clients:
        cluster = self

        class Custom:
            def get_namespaced_custom_object(self, group, version, namespace, plural, name):
                assert (group, version, namespace) == ("apps.nvidia.com", "v1alpha1", NS)
                if plural == "nimcaches" and cluster.script:
                    cluster.script.pop(0)(cluster)
                if cluster.fail_with:
                    raise cluster.fail_with
                obj = cluster.objects.get((plural, name))
                if obj is None:
                    raise ApiException(status=404, reason="Not Found")
                return obj

        class Apps:
            def read_namespaced_deployment(self, name, namespace):
                if cluster.deployment is None:
                    raise ApiException(status=404, reason="Not Found")
                return cluster.deployment

        class Core:
            def list_namespaced_pod(self, namespace, label_selector=""):
                cluster.selectors.append(label_selector)
                return SimpleNamespace(items=cluster.pods)

            def list_namespaced_event(self, namespace, field_selector=""):
                return SimpleNamespace(items=[])

            def read_namespaced_pod_log(self, name, namespace, tail_lines=40, container="", previous=False):
                return "getpwuid(): uid not found: 2000\n"

        class Discovery:
            def list_namespaced_endpoint_slice(self, namespace, label_selector=""):
                assert label_selector == f"kubernetes.io/service-name={SERVICE}"
                return SimpleNamespace(items=cluster.slices)

        return kube.Clients(core=Core(), apps=Apps(), batch=None, discovery=Discovery(), custom=Custom())

    def set(self, plural: str, name: str, status: Any) -> None:
        self.objects[(plural, name)] = {"metadata": {"name": name}, "status": status}


def serving(cluster: FakeCluster) -> None:
    cluster.set("nimcaches", CACHE, {"state": "Ready"})
    cluster.set("nimservices", SERVICE, {"state": "Ready"})
    cluster.deployment = {"metadata": {"name": SERVICE, "generation": 2}, "spec": {"replicas": 1},
                          "status": {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}}
    cluster.pods = [{"metadata": {"name": "llama-0", "labels": {"app": SERVICE}},
                     "status": {"phase": "Running", "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0,
                                                                           "state": {"running": {}}}]}}]
    cluster.slices = [{"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True},
                                      "targetRef": {"kind": "Pod", "name": "llama-0"}}]}]


# --- preflight ---------------------------------------------------------------------------------

def test_present_crds_pass():
    api = FakeApiextensions({name: crd(name) for name in CRD_NAMES})
    assert missing_crds(None, api) == []
    assert api.reads == list(CRD_NAMES), "read by name, nothing listed"


def test_absent_crds_are_named():
    api = FakeApiextensions({CRD_NAMES[0]: crd(CRD_NAMES[0])})
    assert missing_crds(None, api) == ["nimservices.apps.nvidia.com"]


def test_a_crd_without_the_served_version_counts_as_missing():
    api = FakeApiextensions({CRD_NAMES[0]: crd(CRD_NAMES[0], version="v1beta1"),
                             CRD_NAMES[1]: crd(CRD_NAMES[1], served=False)})
    assert missing_crds(None, api) == [f"{n} (version v1alpha1 not served)" for n in CRD_NAMES]


def test_forbidden_is_not_missing():
    api = FakeApiextensions({name: ApiException(status=403, reason="Forbidden") for name in CRD_NAMES})
    with pytest.raises(ApiException):
        missing_crds(None, api)


def _check(crds: dict[str, Any]):
    # The props deployed stacks record for the check: ``model`` and ``crds``.
    return check_required({"model": "llama", "crds": list(CRD_NAMES)},
                          connect=lambda target: None, api_for=lambda clients: FakeApiextensions(crds))


def test_cluster_without_the_operator_fails_with_instructions():
    with pytest.raises(NimOperatorMissing) as caught:
        _check({})
    text = str(caught.value)
    assert text.startswith("model llama uses path: operator")
    assert "nimcaches.apps.nvidia.com, nimservices.apps.nvidia.com, missing on this cluster" in text
    assert "helm install nim-operator nvidia/k8s-nim-operator" in text and "path: raw" in text
    assert "https://helm.ngc.nvidia.com/nvidia" in text


def test_cluster_with_the_operator_passes():
    api = FakeApiextensions({name: crd(name) for name in CRD_NAMES})
    # No CrdsMissing (it would raise here), and the check did look up each CRD it requires.
    check_required({"model": "llama", "crds": list(CRD_NAMES)}, connect=lambda target: None,
                   api_for=lambda clients: api)
    assert sorted(api.reads) == sorted(CRD_NAMES)


@pytest.fixture
def fake_api(monkeypatch):
    """Route the provider's own connect / apiextensions to fakes (as the engine would call it)."""
    state: dict[str, Any] = {"crds": {}}
    monkeypatch.setattr(kube, "connect", lambda target: kube.Clients(None, None, None, None, None))
    monkeypatch.setattr(crd_check, "apiextensions", lambda clients: FakeApiextensions(state["crds"]))
    return state


def test_preview_check_reports_missing_crds_as_a_check_failure(fake_api):
    result = NimOperatorCheckProvider().check({}, {"model": "llama", "crds": list(CRD_NAMES)})
    (failure,) = result.failures
    assert failure.property == "" and "k8s-nim-operator" in failure.reason


def test_preview_check_passes_when_it_cannot_decide(fake_api):
    fake_api["crds"] = {name: ApiException(status=403, reason="Forbidden") for name in CRD_NAMES}
    assert NimOperatorCheckProvider().check({}, {"model": "llama"}).failures == []


def test_create_fails_early_without_the_crds(fake_api):
    with pytest.raises(NimOperatorMissing, match="nimservices.apps.nvidia.com"):
        NimOperatorCheckProvider().create({"model": "llama", "crds": list(CRD_NAMES)})


def test_create_stands_with_the_crds(fake_api):
    fake_api["crds"] = {name: crd(name) for name in CRD_NAMES}
    result = NimOperatorCheckProvider().create({"model": "llama", "crds": list(CRD_NAMES)})
    assert result.id == "llama-nim-operator" and result.outs["checked_at"]


def test_check_diff_ignores_the_provider_and_never_replaces():
    provider = NimOperatorCheckProvider()
    props = {"model": "llama", "crds": list(CRD_NAMES)}
    assert not provider.diff("id", props, {**props, "__provider": "x"}).changes
    assert provider.diff("id", props, {**props, "context": "other"}).replaces == []


# --- status ----------------------------------------------------------------------------------

def test_observe_finds_the_operators_objects_and_labels_its_pods_as_servers():
    cluster = FakeCluster()
    serving(cluster)
    obs = observe_nim(cluster.clients(), PROPS)
    assert cluster.selectors == [f"app={SERVICE}"], "the operator selects its pods by `app`"
    assert obs.core.pods[0]["metadata"]["labels"]["app.kubernetes.io/component"] == "server"
    assert "app.kubernetes.io/component" not in cluster.pods[0]["metadata"]["labels"], "the read object is not edited"


def test_observe_stops_when_the_service_does_not_exist():
    cluster = FakeCluster()
    obs = observe_nim(cluster.clients(), PROPS)
    assert obs.service is None and cluster.selectors == []


def test_wait_until_ready_through_null_and_not_ready_states():
    cluster = FakeCluster()
    cluster.script = [
        lambda c: c.set("nimservices", SERVICE, None),                           # created, status null
        lambda c: (c.set("nimcaches", CACHE, {"state": "InProgress"}),
                   c.set("nimservices", SERVICE, {"state": "NotReady"})),
        serving,
    ]
    sleeps = []
    status = wait_until_serving(PROPS, sleep=sleeps.append, clock=lambda: 0.0, connect=lambda t: cluster.clients())
    assert status.state == "READY" and status.targets == ["llama-0"]
    assert len(sleeps) == 2


def test_wait_stops_at_a_failed_cache_with_its_message():
    cluster = FakeCluster()
    cluster.set("nimservices", SERVICE, {"state": "NotReady"})
    cluster.set("nimcaches", CACHE, {"state": "Failed", "conditions": [
        {"type": "NIM_CACHE_JOB_COMPLETED", "status": "False", "reason": "JobFailed", "message": "401 Unauthorized"}]})
    with pytest.raises(NimModelNotServing) as caught:
        wait_until_serving(PROPS, sleep=lambda s: None, clock=lambda: 0.0, connect=lambda t: cluster.clients())
    assert "model llama is ERROR" in str(caught.value) and "401 Unauthorized" in str(caught.value)


def test_unreadable_status_is_unknown_never_a_guess():
    cluster = FakeCluster()
    cluster.fail_with = ApiException(status=403, reason="Forbidden")
    status = current_nim_status(cluster.clients(), PROPS)
    assert status.state == "UNKNOWN" and status.reason == "read-failed"


def test_refresh_reports_unknown_when_the_cluster_is_unreachable(monkeypatch):
    def unreachable(target):
        raise kube.ClusterUnreachable("connection refused")

    monkeypatch.setattr(kube, "connect", unreachable)
    result = NimStatusProvider().read("llm/llama", {**PROPS, "state": "READY", "message": "old"})
    assert result.outs["state"] == "UNKNOWN" and "connection refused" in result.outs["message"]
    assert "state" not in result.inputs


def test_status_diff_treats_unknown_inputs_as_changes():
    provider = NimStatusProvider()
    assert provider.diff("id", PROPS, {**PROPS, "service_revision": UNKNOWN_INPUT}).changes
    assert not provider.diff("id", PROPS, {**PROPS, "__provider": "other"}).changes


@pytest.mark.parametrize("state", ["ERROR", "PENDING", "UNKNOWN"])
def test_a_record_that_is_not_ready_is_waited_on_again(state):
    """After a refresh recorded the model not serving, the next `up` must wait again (and fail
    with the reason or record READY), not succeed over the stale record: as the raw path does."""
    provider = NimStatusProvider()
    assert provider.diff("id", {**PROPS, "state": state}, dict(PROPS)).changes
    assert not provider.diff("id", {**PROPS, "state": "READY"}, dict(PROPS)).changes


@pytest.mark.parametrize("cls", [NimOperatorCheckProvider, NimStatusProvider])
def test_providers_pickle_with_dill_as_the_engine_does(cls, fake_api):
    import base64

    import dill
    from pulumi.dynamic import dynamic as pulumi_dynamic

    provider = cls()
    provider.check({}, {"model": "llama"}) if cls is NimOperatorCheckProvider else None
    assert vars(provider) == {}, "no clients or state on the instance"
    restored = dill.loads(base64.b64decode(pulumi_dynamic.serialize_provider(provider)))
    assert type(restored).__name__ == cls.__name__ and vars(restored) == {}


# --- multiNode is immutable ------------------------------------------------------------------

RAY = '{"backendType": "lws", "parallelism": {"pipeline": 2, "tensor": 8}, "ray": {"rayPort": 6379}}'
MPI = '{"backendType": "lws", "mpi": {"mpiStartTimeout": 300}, "parallelism": {"pipeline": 2, "tensor": 8}}'


def _check_props(multi_node: str = "") -> dict:
    props = {"model": "llama", "crds": list(CRD_NAMES), "kubeconfig": "", "context": ""}
    return {**props, "multi_node": multi_node} if multi_node else props


@pytest.mark.parametrize("before, after", [(RAY, MPI), ("", RAY), (RAY, "")],
                         ids=["changed", "added to a deployed one-node model", "removed"])
def test_a_multinode_change_of_a_deployed_model_is_refused_at_preview(fake_api, before, after):
    fake_api["crds"] = {name: crd(name) for name in CRD_NAMES}
    result = NimOperatorCheckProvider().check(_check_props(before), _check_props(after))
    (failure,) = result.failures
    assert failure.property == "multi_node"
    assert failure.reason.startswith("model llama: multiNode cannot change on a deployed NIMService")
    assert f"Deployed: {before or 'no multiNode'}; asked: {after or 'no multiNode'}" in failure.reason
    assert "keep models[].multiNode as deployed, or take the model down first" in failure.reason


@pytest.mark.parametrize("before, after", [({}, _check_props(RAY)), (_check_props(RAY), _check_props(RAY)),
                                           (_check_props(), _check_props())],
                         ids=["first deployment", "unchanged", "one-node"])
def test_a_first_deployment_or_an_unchanged_multinode_passes(fake_api, before, after):
    fake_api["crds"] = {name: crd(name) for name in CRD_NAMES}
    assert NimOperatorCheckProvider().check(before, after).failures == []
