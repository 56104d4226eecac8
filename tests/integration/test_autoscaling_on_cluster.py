"""Autoscaling on the real engine and the simulated cluster (issue 16 item 2).

No KEDA controller runs here (nor Prometheus): the module installs KEDA 2.16.1's own ScaledObject
CRD (from its Go module, see tests/real_crds.py) and plays the autoscaler by
scaling the Deployment through its scale subresource, as the HPA KEDA creates does. What it
proves is the stack's side: the CRD is checked at preview, the ScaledObject is accepted by KEDA's
schema, and `pulumi preview` / `up` leave the autoscaler's replica count alone.

Order is the file's order: first the cluster without the CRD (the autoscaled stack stops at
preview), then with it. The CRD is deleted when the module ends, after its stacks are destroyed.
"""

from __future__ import annotations

import pytest

from components.compile.autoscaling import compile_scaled_object
from components.config import load_stack_config
from tests.support.fixture_crds import WAIT, FixtureCrds, wait_for
from tests.support.harness import small_model, stack_config
from tests.support.real_crds import operator_crd

pytestmark = pytest.mark.integration

KEDA_CRD = FixtureCrds([operator_crd("keda", "keda.sh_scaledobjects.yaml")], "keda-crds")
RWX = {"size": "1Gi", "accessMode": "ReadWriteMany"}  # several replicas share one weights volume
# No Prometheus (nor its Operator's CRDs) here: these tests are about the replica count, so the
# stacks say the pods are scraped another way instead of turning platform.metrics on.
SCRAPED_ELSEWHERE = {"autoscaling": {"requireModelMetrics": False}}


def autoscaled_config(namespace: str, **autoscaling) -> dict:
    scaling = {"enabled": True, "minReplicas": 1, "maxReplicas": 4, **autoscaling}
    return stack_config(namespace, [small_model(weights=RWX, autoscaling=scaling)], **SCRAPED_ELSEWHERE)


def fixed_config(namespace: str, replicas: int) -> dict:
    return stack_config(namespace, [small_model(weights=RWX, replicas=replicas)])


# --- the CRD ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def cluster_without_the_crd_at_the_end(kube):
    """Autouse, so set up before ``make_project`` and torn down after it has destroyed the stacks."""
    yield from KEDA_CRD.absent_until_installed(kube, "a real KEDA")


@pytest.fixture(scope="module")
def crd_installed(kube):
    KEDA_CRD.install(kube)


# --- the autoscaler, played ---------------------------------------------------------------------

def scale(kube, namespace: str, name: str, replicas: int) -> None:
    """What the HPA does: write the count through the Deployment's scale subresource."""
    kube.AppsV1Api().patch_namespaced_deployment_scale(
        name, namespace, {"spec": {"replicas": replicas}}, field_manager="simulated-hpa")


def deployment(kube, namespace: str, name: str = "tiny"):
    return kube.AppsV1Api().read_namespaced_deployment(name, namespace)


def replicas_owners(kube, namespace: str, name: str = "tiny") -> list[str]:
    """The field managers that own the Deployment's spec.replicas."""
    owners = []
    for entry in deployment(kube, namespace, name).metadata.managed_fields or []:
        fields = entry.fields_v1 or {}
        if "f:replicas" in (fields.get("f:spec") or {}):
            owners.append(entry.manager)
    return owners


def changed_steps(project) -> list[tuple[str, str, list]]:
    return [(s["op"], s["urn"].rsplit("::", 1)[-1], s.get("diffs") or [])
            for s in project.preview_steps() if s["op"] != "same"]


# --- without the CRD ----------------------------------------------------------------------------

def test_without_kedas_crd_the_autoscaled_stack_stops_at_preview_with_the_fix(make_project):
    project = make_project(autoscaled_config)
    result = project.run("preview", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "model tiny: autoscaling.enabled needs scaledobjects.keda.sh, missing on this cluster" in output, output[-3000:]
    assert "helm install keda kedacore/keda" in output


# --- with the CRD -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def deployed(crd_installed, make_project):
    project = make_project(autoscaled_config)
    project.up()
    return project


def test_the_scaled_object_is_stored_as_compiled_and_targets_the_deployment(deployed, kube):
    stored = kube.CustomObjectsApi().get_namespaced_custom_object(
        "keda.sh", "v1alpha1", deployed.namespace, "scaledobjects", "tiny")
    stack = load_stack_config(autoscaled_config(deployed.namespace))
    # Nothing pruned: every field written is one KEDA's schema declares.
    assert stored["spec"] == compile_scaled_object(stack.models[0], stack)["spec"]
    assert stored["spec"]["scaleTargetRef"]["name"] == deployment(kube, deployed.namespace).metadata.name


def test_the_stack_does_not_own_the_replica_count(deployed, kube):
    live = deployment(kube, deployed.namespace)
    assert live.spec.replicas == 1  # the API server's default until an autoscaler writes one
    assert not [m for m in replicas_owners(kube, deployed.namespace) if m.startswith("pulumi")]
    assert deployed.outputs()["models"]["tiny"]["status"]["state"] == "READY"


def test_preview_and_up_leave_the_autoscalers_count_alone(deployed, kube):
    ns = deployed.namespace
    scale(kube, ns, "tiny", 3)
    wait_for(lambda: (deployment(kube, ns).status.ready_replicas or 0) == 3, WAIT, "3 ready replicas")
    # The field was nobody's, and a write through the scale subresource does not make it anyone's
    # (Kubernetes 1.36 here): no apply can conflict with it, and no apply removes it.
    assert not [m for m in replicas_owners(kube, ns) if m.startswith("pulumi")]

    assert changed_steps(deployed) == []  # no diff on the Deployment, nor anything else

    deployed.up()
    live = deployment(kube, ns)
    assert live.spec.replicas == 3 and (live.status.ready_replicas or 0) == 3


def test_a_model_switched_from_fixed_replicas_without_handover_drops_to_one(crd_installed, make_project, kube):
    """What docs/05-day-2.md and the preview report warn of: the stack owned spec.replicas, the
    autoscaled manifest leaves it out, server-side apply removes it and the API default (1)
    holds until an autoscaler raises it (none runs here)."""
    project = make_project(lambda ns: fixed_config(ns, 2))
    project.up()
    assert deployment(kube, project.namespace).spec.replicas == 2
    project.write_config(autoscaled_config(project.namespace))
    project.up()
    assert deployment(kube, project.namespace).spec.replicas == 1
    assert not replicas_owners(kube, project.namespace)


def test_a_model_switched_from_fixed_replicas_keeps_its_pods_with_the_documented_handover(crd_installed, make_project, kube):
    """Fixed `replicas: 2` first: the stack owns spec.replicas. Dropping the field from an apply
    the stack owns would reset it to the API default, 1 (server-side apply removes what its
    manager no longer declares). The handover of docs/05-day-2.md (another manager applies the
    same count first) keeps both pods through the switch."""
    project = make_project(lambda ns: fixed_config(ns, 2))
    project.up()
    ns = project.namespace
    assert [m for m in replicas_owners(kube, ns) if m.startswith("pulumi")]
    handover = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "tiny", "namespace": ns},
                "spec": {"replicas": 2}}
    kube.AppsV1Api().patch_namespaced_deployment(
        "tiny", ns, handover, field_manager="llm-serving-handover",
        _content_type="application/apply-patch+yaml")
    project.write_config(autoscaled_config(ns))
    project.up()
    live = deployment(kube, ns)
    assert live.spec.replicas == 2 and (live.status.ready_replicas or 0) == 2
    assert replicas_owners(kube, ns) == ["llm-serving-handover"]
    assert kube.CustomObjectsApi().get_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects", "tiny")


def test_a_spec_change_rolls_out_at_the_autoscalers_count(deployed, kube):
    """A change of the pod template under autoscaling: `up` applies it without touching the
    count, and the Deployment rolls it out over the autoscaler's replicas. (With spec.replicas
    in the manifest this `up` fails: a server-side apply conflict on .spec.replicas, with the
    manager that scaled it; checked by putting the field back.)"""
    ns = deployed.namespace
    before = deployment(kube, ns).spec.replicas
    scaling = {"enabled": True, "minReplicas": 1, "maxReplicas": 4}
    deployed.write_config(stack_config(ns, [small_model(weights=RWX, env={"VLLM_LOGGING_LEVEL": "DEBUG"},
                                                        autoscaling=scaling)], **SCRAPED_ELSEWHERE))
    deployed.up()  # the status waits for the new spec on every pod, minReplicas of them ready
    live = deployment(kube, ns)
    assert live.spec.replicas == before == 3
    env = {e.name: e.value for e in live.spec.template.spec.containers[0].env or []}
    assert env.get("VLLM_LOGGING_LEVEL") == "DEBUG"
