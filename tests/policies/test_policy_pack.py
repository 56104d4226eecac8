"""The pack itself: assembled from the rules by __main__, stable names, config schema, and the
adapter driven through pulumi-policy's own analyzer servicer with the engine's wire messages
(numbers as floats, unknown sentinels, dependency URNs) - everything but the CLI."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2 as proto
from pulumi_policy import EnforcementLevel, Severity
from pulumi_policy.policy import _PolicyAnalyzerServicer

from policies.rules import ALL_RULES
from policies.rules.base import Rule, resource_rule
from policies.rules.kube import type_token
from policies.rules.pack import policies, to_policy
from tests.support.policy_helpers import PROVIDER_URN, compliant, container, logical_name, urn

PACK = Path(__file__).resolve().parents[2] / "policies"
UNKNOWN_NUMBER = "3eeb2bf0-c639-47a8-9e75-3b44932eb421"
FIX = "Do the one thing that fixes it."

STABLE_NAMES = [
    "llm-serving-pod-engine-identity",
    "llm-serving-pod-puller-server-identity-match",
    "llm-serving-pod-run-as-non-root",
    "llm-serving-pod-no-privilege-escalation",
    "llm-serving-pod-no-privileged",
    "llm-serving-pod-no-host-path",
    "llm-serving-pod-service-links-disabled",
    "llm-serving-image-fully-qualified",
    "llm-serving-image-no-latest",
    "llm-serving-image-pinned",
    "llm-serving-gpu-shm-size-limit",
    "llm-serving-gpu-limits",
    "llm-serving-rbac-no-wildcards",
    "llm-serving-rbac-no-cluster-admin",
    "llm-serving-rbac-teardown-verbs",
    "llm-serving-rbac-teardown-least-privilege",
    "llm-serving-rbac-backend-router-scope",
    "llm-serving-router-topology",
    "llm-serving-router-backend-target",
    "llm-serving-router-drain",
    "llm-serving-gateway-read-only-root",
    "llm-serving-gateway-strips-caller-headers",
    "llm-serving-router-behind-gateway",
    "llm-serving-gateway-keys-guard-router",
    "llm-serving-stack-server-weights-gate",
    "llm-serving-server-drain-grace",
    "llm-serving-server-topology-spread",
    "llm-serving-server-disruption-budget",
    "llm-serving-stack-monitor-selects-service",
    "llm-serving-nim-multinode-shape",
    "llm-serving-stack-controllers-own-their-pods",
    "llm-serving-scaled-object-wakes-from-zero",
    "llm-serving-cpu-server-settings",
]


def test_rule_names_are_stable():
    # Names are what people put in pack config and CI filters: renaming one is a breaking change.
    assert [rule.name for rule in ALL_RULES] == STABLE_NAMES


def test_every_rule_says_how_to_fix_in_its_own_field():
    for rule in ALL_RULES:
        assert "Fix:" not in rule.description and len(rule.fix) > 20, rule.name
        assert rule.severity in ("low", "medium", "high", "critical"), rule.name


def test_remediation_severity_and_url_are_pulumi_policy_fields():
    by_name = {p.name: p for p in policies()}
    for rule in ALL_RULES:
        policy = by_name[rule.name]
        assert policy.description == rule.description and policy.remediation_steps == rule.fix, rule.name
        assert policy.severity is Severity(rule.severity) and policy.url == rule.url, rule.name
    assert by_name["llm-serving-rbac-no-cluster-admin"].severity is Severity.CRITICAL
    assert by_name["llm-serving-pod-run-as-non-root"].url == "https://kubernetes.io/docs/concepts/security/pod-security-standards/"


def test_main_only_assembles_the_pack(monkeypatch):
    captured = {}

    def fake_pack(**kwargs):  # the real PolicyPack starts a gRPC server and blocks
        captured.update(kwargs)

    monkeypatch.setattr("pulumi_policy.PolicyPack", fake_pack)
    saved_path = list(sys.path)
    try:
        runpy.run_path(str(PACK), run_name="__main__")
    finally:
        sys.path[:] = saved_path
        for name in [m for m in sys.modules if m == "rules" or m.startswith("rules.")]:
            del sys.modules[name]
    assert captured["name"] == "llm-serving"
    assert [p.name for p in captured["policies"]] == STABLE_NAMES
    assert captured["enforcement_level"] == EnforcementLevel.MANDATORY


def test_pack_files_pin_versions():
    requirements = (PACK / "requirements.txt").read_text().split()
    assert "pulumi-policy==1.21.0" in requirements and "pulumi==3.272.0" in requirements
    assert "runtime:" in (PACK / "PulumiPolicy.yaml").read_text()


def test_identity_config_schema_defaults():
    (identity,) = [p for p in policies() if p.name == "llm-serving-pod-engine-identity"]
    props = identity.config_schema.properties
    assert {k: v["default"] for k, v in props.items()} == {"vllmUid": 2000, "vllmGid": 0, "nimUid": 1000, "nimGid": 2000}


def test_rule_names_must_follow_the_convention():
    with pytest.raises(ValueError, match="llm-serving-<kind>-<rule>"):
        resource_rule("pods-root", "x.", ["Pod"], fix=FIX, severity="low")(lambda obj, config: [])
    with pytest.raises(ValueError, match="how to fix"):
        resource_rule("llm-serving-pod-x", "no fix given", ["Pod"], fix="", severity="low")(lambda obj, config: [])
    with pytest.raises(ValueError, match="belongs in fix="):
        resource_rule("llm-serving-pod-x", "x. Fix: y", ["Pod"], fix=FIX, severity="low")(lambda obj, config: [])
    with pytest.raises(ValueError, match="severity must be one of"):
        resource_rule("llm-serving-pod-x", "x.", ["Pod"], fix=FIX, severity="severe")(lambda obj, config: [])


# ---- through pulumi-policy's analyzer servicer -------------------------------------------


def servicer(config: dict | None = None) -> _PolicyAnalyzerServicer:
    service = _PolicyAnalyzerServicer("llm-serving", "0.1.0", policies(), EnforcementLevel.MANDATORY)
    request = proto.ConfigureAnalyzerRequest()
    for name, values in (config or {}).items():
        level = {"disabled": proto.DISABLED, "advisory": proto.ADVISORY}.get(values.pop("enforcementLevel", ""), proto.MANDATORY)
        entry = proto.PolicyConfig(enforcementLevel=level)
        entry.properties.update(values)
        request.policyConfig[name].CopyFrom(entry)
    service.Configure(request, None)
    return service


def struct(value: dict) -> struct_pb2.Struct:
    return json_format.ParseDict(value, struct_pb2.Struct())


def analyze(service, manifest: dict) -> proto.AnalyzeResponse:
    token = type_token(manifest["apiVersion"], manifest["kind"])
    name = logical_name(manifest)
    return service.Analyze(proto.AnalyzeRequest(type=token, properties=struct(manifest), urn=urn(token, name), name=name), None)


def analyze_stack(service, world) -> proto.AnalyzeResponse:
    resources = []
    for r in world.stack().resources:
        resource = proto.AnalyzerResource(type=r.type, urn=r.urn, name=r.name, properties=struct(r.props),
                                          dependencies=list(r.dependencies))
        if r.provider_props is not None:
            resource.provider.CopyFrom(proto.AnalyzerProviderResource(
                type="pulumi:providers:kubernetes", urn=PROVIDER_URN, name="cluster", properties=struct(r.provider_props)))
        resources.append(resource)
    return service.AnalyzeStack(proto.AnalyzeStackRequest(resources=resources), None)


def test_info_lists_every_policy_with_its_schema():
    info = servicer().GetAnalyzerInfo(None, None)
    assert [p.name for p in info.policies] == STABLE_NAMES
    assert all(p.enforcementLevel == proto.MANDATORY for p in info.policies)
    (identity,) = [p for p in info.policies if p.name == "llm-serving-pod-engine-identity"]
    assert identity.configSchema.properties["vllmUid"]["default"] == 2000
    # What Pulumi Cloud shows beside a violation: the fix, severity and url in their own fields.
    assert identity.remediation_steps.startswith("Set runAsUser/runAsGroup") and "Fix:" not in identity.description
    assert identity.severity == proto.POLICY_SEVERITY_HIGH
    assert identity.url == "https://kubernetes.io/docs/tasks/configure-pod-container/security-context/"


def test_every_compliant_object_passes_through_the_servicer():
    service = servicer()
    for manifest in compliant().manifests:
        response = analyze(service, manifest)
        assert list(response.diagnostics) == [], (manifest["kind"], manifest["metadata"]["name"])


def test_violation_reaches_the_engine_with_rule_name_and_fix():
    world = compliant()
    container(world.server("qwen"), "server")["securityContext"]["runAsUser"] = 1000
    response = analyze(servicer(), world.server("qwen"))
    by_rule = {d.policyName: d for d in response.diagnostics}
    assert set(by_rule) == {"llm-serving-pod-engine-identity"}
    diagnostic = by_rule["llm-serving-pod-engine-identity"]
    # The CLI prints the description and the message: the message ends with the fix.
    description, finding, fix = diagnostic.message.split("\n")
    assert description == diagnostic.description and "has runAsUser 1000" in finding
    assert fix.startswith("Fix: Set runAsUser/runAsGroup")
    assert diagnostic.enforcementLevel == proto.MANDATORY and diagnostic.severity == proto.POLICY_SEVERITY_HIGH


def test_unknown_during_preview_is_not_applicable_never_a_violation():
    world = compliant()
    container(world.server("qwen"), "server")["securityContext"]["runAsUser"] = UNKNOWN_NUMBER
    response = analyze(servicer(), world.server("qwen"))
    assert list(response.diagnostics) == []
    reasons = {n.policy_name: n.reason for n in response.not_applicable}
    assert "cannot be checked until apply" in reasons["llm-serving-pod-engine-identity"]
    assert "runAsUser" in reasons["llm-serving-pod-engine-identity"]


def test_pack_config_sets_identity_and_enforcement():
    world = compliant()
    moved = servicer({"llm-serving-pod-engine-identity": {"vllmUid": 3000, "enforcementLevel": "advisory"}})
    (diagnostic,) = analyze(moved, world.server("qwen")).diagnostics
    assert "must use 3000" in diagnostic.message and diagnostic.enforcementLevel == proto.ADVISORY
    container(world.server("qwen"), "server")["image"] = "vllm/vllm-openai:latest"
    off = servicer({"llm-serving-image-no-latest": {"enforcementLevel": "disabled"}})
    assert {d.policyName for d in analyze(off, world.server("qwen")).diagnostics} == {"llm-serving-image-fully-qualified"}


@pytest.mark.parametrize("rendering", [False, True], ids=["cluster", "rendering"])
def test_stack_policies_read_the_engine_graph(rendering):
    assert list(analyze_stack(servicer(), compliant(rendering)).diagnostics) == []


def test_stack_violation_is_reported_on_the_deployment():
    world = compliant()
    world.removed_edges.add(("qwen-server", "qwen-weights-gate"))
    (diagnostic,) = analyze_stack(servicer(), world).diagnostics
    assert diagnostic.policyName == "llm-serving-stack-server-weights-gate"
    assert diagnostic.urn == urn("kubernetes:apps/v1:Deployment", "qwen-server")


def test_a_broken_rule_reports_instead_of_crashing_the_analyzer():
    @resource_rule("llm-serving-pod-broken", "Always breaks.", ["Deployment"], fix=FIX, severity="low")
    def broken(obj, config):
        raise KeyError("spec")

    service = _PolicyAnalyzerServicer("llm-serving", "0.1.0", [to_policy(broken)], EnforcementLevel.MANDATORY)
    (diagnostic,) = analyze(service, compliant().server("qwen")).diagnostics
    assert "could not run (KeyError" in diagnostic.message


def test_non_kubernetes_resources_are_ignored():
    service = servicer()
    response = service.Analyze(proto.AnalyzeRequest(
        type="pulumi-python:dynamic/llm-serving:WeightsGate", properties=struct({"model": "qwen"}),
        urn=urn("pulumi-python:dynamic/llm-serving:WeightsGate", "qwen-weights-gate"), name="qwen-weights-gate"), None)
    assert list(response.diagnostics) == [] and list(response.not_applicable) == []


def test_rule_objects_are_plain_callables():
    assert isinstance(ALL_RULES[0], Rule)
    obj_findings = ALL_RULES[0](compliant().objects()[0])
    assert obj_findings == []


def test_example_config_matches_the_schemas():
    import json

    config = json.loads((PACK / "config.example.json").read_text())
    by_name = {rule.name: rule for rule in ALL_RULES}
    for name, values in config.items():
        if name == "all":
            assert values in ("advisory", "mandatory", "disabled")
            continue
        assert name in by_name, name
        assert set(values) - {"enforcementLevel"} <= set(by_name[name].config), name
    for rule in ALL_RULES:
        for key, schema in rule.config.items():
            assert {"type", "default", "description"} <= set(schema), (rule.name, key)
