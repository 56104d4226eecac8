"""The plans ModelServer declares (components.compile.plan): children by the roles
``components.children`` defines, waits on earlier children only, and the render-mode rule that a
child needing a cluster is left out with its dependents waiting on what it waited on."""

from __future__ import annotations

import pytest

from components import children as roles
from components.compile.plan import PLATFORM, model_plan
from components.config import load_stack_config
from components.config.platform import PlatformConfig
from contract.props import GateProps, NimOperatorCheckProps, OperatorObjects, RawObjects, RequiredCrdsProps, StatusProps
from providers.transience import DEFAULT_RESTART_THRESHOLD

NGC_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"
MODELS = {
    "vllm": {"name": "plain", "source": {"repo": "org/plain"}, "resources": {"memory": "32Gi"}},
    "nim-raw": {"name": "raw", "engine": "nim", "image": NGC_IMAGE, "source": {"repo": "org/raw"},
                "resources": {"memory": "48Gi"}, "nim": {"authSecret": "ngc-api"}},
    "nim-operator": {"name": "op", "engine": "nim", "path": "operator", "image": NGC_IMAGE,
                     "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}, "resources": {"memory": "48Gi"},
                     "nim": {"authSecret": "ngc-api"}},
}


def plan(kind: str, **platform):
    stack = load_stack_config({"platform": {"sharedMemorySizeLimit": "1Gi", **platform}, "models": [MODELS[kind]]})
    return model_plan(stack.models[0], stack)


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("policy", [False, True])
def test_children_use_the_defined_roles_and_wait_on_earlier_children_only(kind: str, policy: bool) -> None:
    model_plan_ = plan(kind, networkPolicy={"enabled": policy, "allowFrom": []})
    seen: set[str] = {PLATFORM}
    for child in model_plan_.children:
        assert child.role in roles.MODEL_ROLES, child.role
        # An optional policy may be absent from the plan: a wait on it is dropped when declaring.
        optional = {roles.NETWORK_POLICY, roles.PULLER_NETWORK_POLICY}
        assert set(child.after) <= seen | optional, (child.role, child.after)
        assert (child.manifest is None) != (child.props is None), child.role
        seen.add(child.role)
    assert (roles.NETWORK_POLICY in seen) is policy
    assert (roles.PULLER_NETWORK_POLICY in seen) is (policy and kind != "nim-operator")


def test_the_raw_plan_in_order() -> None:
    raw = plan("vllm")
    assert [c.role for c in raw.children] == [roles.WEIGHTS, roles.PULLER, roles.WEIGHTS_GATE, roles.SERVER,
                                              roles.SERVICE, roles.STATUS]
    assert [type(c.props) for c in raw.children if c.props] == [GateProps, StatusProps]
    assert isinstance(raw.status.objects, RawObjects) and raw.status.objects.deployment == "plain"


@pytest.mark.parametrize("image", ["docker.io/vllm/vllm-openai:v0.11.0", "registry.example.com/other/puller:1.0"])
def test_the_gate_the_status_and_the_outputs_name_the_puller_job_as_compiled(image: str) -> None:
    # The Job's name carries its template's hash (common.puller_name); the gate keys on it, so a new
    # template is a new gate that waits for the new Job before serving goes on.
    raw = plan("vllm", pullerImage=image)
    [job] = [c.manifest for c in raw.children if c.role == roles.PULLER]
    [gate] = [c.props for c in raw.children if c.role == roles.WEIGHTS_GATE]
    assert gate.puller_job == job["metadata"]["name"] == raw.status.objects.puller_job
    assert raw.outputs["objects"]["puller"] == job["metadata"]["name"]


def test_the_operator_plan_in_order() -> None:
    operator = plan("nim-operator")
    assert [c.role for c in operator.children] == [roles.NIM_OPERATOR_CHECK, roles.NIM_CACHE, roles.NIM_SERVICE,
                                                   roles.STATUS]
    assert [type(c.props) for c in operator.children if c.props] == [NimOperatorCheckProps, StatusProps]
    assert isinstance(operator.status.objects, OperatorObjects)
    assert [c.replace_on_changes for c in operator.children if c.role == roles.NIM_CACHE] == [("spec",)]


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_on_a_cluster_everything_is_declared_with_its_own_waits(kind: str) -> None:
    model_plan_ = plan(kind, networkPolicy={"enabled": True, "allowFrom": []})
    declared = list(model_plan_.declared(rendering=False))
    assert [c for c, _ in declared] == list(model_plan_.children)
    assert all(waits == child.after for child, waits in declared)


def test_rendering_leaves_out_the_cluster_children_and_passes_their_waits_on() -> None:
    raw = {c.role: waits for c, waits in plan("vllm", networkPolicy={"enabled": True, "allowFrom": []}).declared(rendering=True)}
    assert roles.WEIGHTS_GATE not in raw and roles.STATUS not in raw
    assert raw[roles.SERVER] == (roles.PULLER, roles.NETWORK_POLICY)
    operator = {c.role: waits for c, waits in plan("nim-operator").declared(rendering=True)}
    assert roles.NIM_OPERATOR_CHECK not in operator
    assert operator[roles.NIM_CACHE] == (PLATFORM,)
    assert operator[roles.NIM_SERVICE] == (roles.NIM_CACHE,)  # no policy: that wait is dropped


def test_the_restart_threshold_reaches_both_status_paths_only_when_set() -> None:
    for kind in MODELS:
        assert "restart_threshold" not in plan(kind).status.to_dict()
        assert plan(kind, restartThreshold=5).status.to_dict()["restart_threshold"] == 5
    # The provider's default is the config's: a stack that leaves it out waits the same.

    assert PlatformConfig.model_fields["restart_threshold"].default == DEFAULT_RESTART_THRESHOLD


def test_an_autoscaled_plan_checks_kedas_crd_first_and_scales_the_server_after_it() -> None:
    stack = load_stack_config({"platform": {"sharedMemorySizeLimit": "1Gi", "metrics": {"enabled": True}}, "models": [{
        **MODELS["vllm"], "weights": {"accessMode": "ReadWriteMany"},
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 4}}]})
    scaled = model_plan(stack.models[0], stack)
    assert [c.role for c in scaled.children] == [roles.CRD_CHECK, roles.WEIGHTS, roles.PULLER, roles.WEIGHTS_GATE,
                                                 roles.SERVER, roles.SERVICE, roles.SERVER_PDB, roles.SCALED_OBJECT,
                                                 roles.SERVICE_MONITOR, roles.STATUS]
    check, scaler = scaled.children[0], scaled.children[-3]
    assert isinstance(check.props, RequiredCrdsProps) and check.after == (PLATFORM,)
    (requirement,) = check.props.requirements
    assert requirement.crds == ("scaledobjects.keda.sh",) and requirement.field == "autoscaling.enabled"
    assert "model plain" in check.props.owner
    assert scaler.manifest["kind"] == "ScaledObject" and scaler.after == (roles.SERVER, roles.CRD_CHECK)
    assert scaled.status.min_replicas == 2
    # Rendering: the check needs a cluster and is left out; the ScaledObject waits on what it waited on.
    rendered = {child.role: waits for child, waits in scaled.declared(rendering=True)}
    assert roles.CRD_CHECK not in rendered and rendered[roles.SCALED_OBJECT] == (roles.SERVER, PLATFORM)


def test_a_plan_without_autoscaling_records_no_floor() -> None:
    assert plan("vllm").status.min_replicas is None
    assert "min_replicas" not in plan("vllm").status.to_dict()
