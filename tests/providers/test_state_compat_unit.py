"""Deployed stacks keep working with this code, checked without an engine.

``state_compat_baseline.json`` is what the code of commit 8485478 declares for one stack of every
kind of child (``record_program.py`` run in that checkout): names, type tokens, the dynamic
resources' inputs and their pickled providers, as the engine stores them in the state. Here:
- the current code declares the same children, with the same type tokens, under the same
  component types, and gives every dynamic resource the same inputs (so `pulumi preview` of a
  deployed stack shows no change from this code; ``tests/integration/test_state_compat.py``
  proves it on the engine);
- every provider pickled by the old code loads from its old module path and works on the props
  the old code recorded: diff against the new inputs, read (`pulumi refresh`), delete (`pulumi
  destroy`).
"""

from __future__ import annotations

import base64
import json
import pickletools
import subprocess
import sys
from pathlib import Path

import dill
import pytest
from kubernetes.client.exceptions import ApiException

from providers import crd_check, kube
from tests.support.fakes import FakeCluster, container_status, deployment, pod, ready_server_pod, ready_slices
from tests.support.names import stem

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
BASELINE = json.loads((HERE / "state_compat_baseline.json").read_text())
DYNAMIC = {name: r for name, r in BASELINE["resources"].items() if "inputs" in r}

# Every provider class a state written by the old code names, by module path and class name.
OLD_PROVIDERS = {
    "alpha-status": ("providers.status", "ModelStatusProvider"),
    "nimraw-status": ("providers.status", "ModelStatusProvider"),
    "nimop-status": ("providers.nim_status", "NimStatusProvider"),
    "nimop-nim-operator-check": ("providers.nim_status", "NimOperatorCheckProvider"),
    "alpha-weights-gate": ("providers.gate", "WeightsGateProvider"),
    "nimraw-weights-gate": ("providers.gate", "WeightsGateProvider"),
    "llm-router-crd-check": ("providers.crd_check", "RequiredCrdsProvider"),
    "llm-router-workload-kind": ("providers.router_guard", "WorkloadKindGuardProvider"),
    "llm-router-targets": ("providers.router_targets", "RouterTargetsProvider"),
}

# Children added on purpose since the baseline, with why. A deployed stack gets them as creates.
ADDED_SINCE_BASELINE = {
    # Issue 15 item 14: the puller's egress policy (DNS and its hub only), when networkPolicy is on.
    "alpha-puller-network-policy": "puller egress policy",
    "nimraw-puller-network-policy": "puller egress policy",
    # Issue 17: the router rendered as the llm-request-router chart renders it.
    "llm-router-headless-service": "always rendered: the backend router watches its EndpointSlices",
    "llm-router-service-account": "the router's own identity, as the chart's",
    "llm-router-role": "the chart's pod-reader Role for the router",
    "llm-router-role-binding": "binds the pod-reader Role",
    "llm-router-service-monitor": "metrics.serviceMonitor covers the router too",
    "llm-router-network-policy": "networkPolicy covers the router",
    "llm-router-backend-network-policy": "networkPolicy covers the backend router",
    # Issue 21: the OpenAI front door, on by default, in front of the router (new objects only).
    "llm-router-gateway": "the gateway's nginx Deployment",
    "llm-router-gateway-config": "its nginx.conf and njs script",
    "llm-router-gateway-service": "the URL clients call",
    "llm-router-gateway-pdb": "two gateway replicas by default: one disruption at a time",
    "llm-router-gateway-network-policy": "networkPolicy covers the gateway",
    # Issue 38: every CRD the stack needs, checked first by the platform (a check: nothing in the cluster).
    "platform-required-crds": "the stack's CRDs, all named at once when missing",
}
# Dynamic-resource inputs changed on purpose since the baseline: (resource, input) -> why. Each
# makes that resource update once (a status record waits again for the rolled-out Deployment).
INPUT_CHANGES_SINCE_BASELINE = {
    ("alpha-status", "deployment_revision"): "issue 15 changed the server pod template (service links, ...)",
    ("nimraw-status", "deployment_revision"): "issue 15 changed the server pod template (NIM's writable cache, ...)",
    ("llm-router-crd-check", "requirements"): "the ServiceMonitor setting moved to router.metrics.serviceMonitor",
    # The puller's template changed since (issue 15), so its Job is replaced, now under a name of its
    # own (common.puller_name): the gate keyed on the name waits for the new Job, the status reads it.
    ("alpha-weights-gate", "puller_job"): "the replaced puller Job has a name of its own",
    ("nimraw-weights-gate", "puller_job"): "the replaced puller Job has a name of its own",
    ("alpha-status", "puller_job"): "the replaced puller Job has a name of its own",
    ("nimraw-status", "puller_job"): "the replaced puller Job has a name of its own",
}


def unchanged_inputs(name: str, inputs: dict) -> dict:
    return {k: v for k, v in plain(inputs).items() if (name, k) not in INPUT_CHANGES_SINCE_BASELINE}


def pickled(inputs: dict) -> bytes:
    value = inputs["__provider"]
    if isinstance(value, dict):  # a secret: the engine's signature key and the value
        value = value["value"]
    return base64.b64decode(value)


def global_named(blob: bytes) -> tuple[str, str]:
    strings = [arg for op, arg, _ in pickletools.genops(blob) if op.name in ("SHORT_BINUNICODE", "BINUNICODE")]
    return strings[0], strings[1]


def plain(inputs: dict) -> dict:
    return {k: v for k, v in inputs.items() if k != "__provider"}


# The weights children are named after their source since (compile/plan.py weights_names:
# `<model>-weights-<hash>`), each aliased to its name before: the engine takes a deployed
# resource under its old name for the new one (tests/component/test_vllm_model.py holds the
# alias, tests/integration/test_state_compat.py proves it on the engine).
def by_name_before(resources: dict) -> dict:
    return {stem(name) if stem(name) in BASELINE["resources"] else name: resource for name, resource in resources.items()}


@pytest.fixture(scope="module")
def current() -> dict:
    """What this checkout declares for the same stack (in a fresh process, as the engine runs it),
    by the names the baseline knows them by."""
    result = subprocess.run([sys.executable, str(HERE / "record_program.py")], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    recorded = json.loads(result.stdout)
    return {**recorded, "resources": by_name_before(recorded["resources"])}


def test_the_baseline_names_every_old_provider_path() -> None:
    assert {name: global_named(pickled(r["inputs"])) for name, r in DYNAMIC.items()} == OLD_PROVIDERS


def test_every_child_keeps_its_name_type_and_component(current: dict) -> None:
    assert current["components"] == BASELINE["components"]
    current_types = {n: r["type"] for n, r in current["resources"].items() if n not in ADDED_SINCE_BASELINE}
    assert current_types == {n: r["type"] for n, r in BASELINE["resources"].items()}
    assert set(ADDED_SINCE_BASELINE) <= set(current["resources"]), "a listed addition is not declared any more"


@pytest.mark.parametrize("name", sorted(DYNAMIC))
def test_every_dynamic_resource_gets_the_inputs_the_state_holds(current: dict, name: str) -> None:
    assert unchanged_inputs(name, current["resources"][name]["inputs"]) == unchanged_inputs(name, DYNAMIC[name]["inputs"])


@pytest.mark.parametrize("name, key", sorted(INPUT_CHANGES_SINCE_BASELINE))
def test_every_listed_input_change_is_real(current: dict, name: str, key: str) -> None:
    assert current["resources"][name]["inputs"][key] != DYNAMIC[name]["inputs"][key]


@pytest.mark.parametrize("name", sorted(DYNAMIC))
def test_an_old_pickled_provider_loads_and_sees_no_change(current: dict, name: str) -> None:
    provider = dill.loads(pickled(DYNAMIC[name]["inputs"]))
    module, cls = OLD_PROVIDERS[name]
    assert isinstance(provider, getattr(__import__(module, fromlist=[cls]), cls))
    olds = dict(DYNAMIC[name]["inputs"])
    news = dict(current["resources"][name]["inputs"])
    if name.endswith("-status"):
        olds.update(state="READY", message="serving", reason="ready", details={}, ready_replicas=1, targets=["p"],
                    observed_at="2026-01-01T00:00:00+00:00")
    changed = any(resource == name for resource, _ in INPUT_CHANGES_SINCE_BASELINE)
    assert provider.diff(f"id-{name}", olds, news).changes is changed
    assert provider.delete(f"id-{name}", olds) is None  # `pulumi destroy` runs the stored provider


def loaded(name: str):
    return dill.loads(pickled(DYNAMIC[name]["inputs"])), plain(DYNAMIC[name]["inputs"])


@pytest.mark.parametrize("name", ["alpha-status", "nimop-status"])
def test_an_old_status_provider_refreshes_from_the_props_it_recorded(monkeypatch, name: str) -> None:
    """The old NimStatusProvider reads the operator's objects, the old ModelStatusProvider the raw ones."""
    provider, props = loaded(name)
    cluster = FakeCluster()
    server = "x-0"
    if name == "nimop-status":
        cluster.put({"kind": "nimcaches", "metadata": {"name": props["nim_cache"], "namespace": props["namespace"]},
                     "status": {"state": "Ready"}},
                    {"kind": "nimservices", "metadata": {"name": "nimop", "namespace": props["namespace"]},
                     "status": {"state": "NotReady"}})
        crashing = pod(server, containers=[container_status(restarts=5, waiting={"reason": "CrashLoopBackOff"})])
        crashing["metadata"]["labels"]["app"] = "nimop"
        crashing["metadata"]["namespace"] = props["namespace"]
        cluster.put({**deployment("nimop"), "metadata": {**deployment("nimop")["metadata"], "namespace": props["namespace"]}},
                    crashing)
    else:
        ready = ready_server_pod(server)
        ready["metadata"]["namespace"] = props["namespace"]
        ready["metadata"]["labels"]["llm-serving.dev/model"] = "alpha"
        slices = ready_slices([server])
        for s in slices:
            s["metadata"].update(namespace=props["namespace"], labels={"kubernetes.io/service-name": "alpha"})
        cluster.put({**deployment("alpha", ready=1),
                     "metadata": {**deployment("alpha")["metadata"], "namespace": props["namespace"]}}, ready, *slices)
    targets = []
    monkeypatch.setattr(kube, "connect", lambda target: targets.append(target) or cluster.clients())

    result = provider.read(f"llm-serving/{props['model']}", {**props, "state": "READY"})

    assert targets == [kube.Target("/etc/llm/kubeconfig", "gpu-cluster")]
    expected = ("ERROR", "crash-loop") if name == "nimop-status" else ("READY", "ready")
    assert (result.outs["state"], result.outs["reason"]) == expected, result.outs["message"]
    assert result.inputs == {**props}


def test_the_old_nim_operator_check_still_checks_with_its_recorded_props(monkeypatch) -> None:
    provider, props = loaded("nimop-nim-operator-check")
    assert props == {"model": "nimop", "crds": ["nimcaches.apps.nvidia.com", "nimservices.apps.nvidia.com"],
                     "kubeconfig": "/etc/llm/kubeconfig", "context": "gpu-cluster"}

    class NoCrds:
        def read_custom_resource_definition(self, name):
            raise ApiException(status=404, reason="Not Found")

    monkeypatch.setattr(kube, "connect", lambda target: kube.Clients(None, None, None, None, None))
    monkeypatch.setattr(crd_check, "apiextensions", lambda clients: NoCrds())
    [failure] = provider.check({}, props).failures
    assert failure.property == ""
    assert "model nimop uses path: operator" in failure.reason and "helm install nim-operator" in failure.reason


def test_an_old_gate_refresh_reads_its_volume_and_job(monkeypatch) -> None:
    provider, props = loaded("alpha-weights-gate")
    cluster = FakeCluster()  # neither the volume nor the Job: the gate is gone, the next `up` gates again
    monkeypatch.setattr(kube, "connect", lambda target: cluster.clients())
    result = provider.read("id", props)
    assert result.id is None
    assert cluster.count("read_namespaced_persistent_volume_claim") == 1
