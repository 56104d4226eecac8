"""RBAC asserted exactly: every Role/ClusterRole (and binding) the shipped stacks render, rule by
rule, by set equality of apiGroups, resources, verbs, resourceNames and nonResourceURLs: one extra
verb, resource, name or rule fails. Checked twice: in what `render` writes (compile_stack) and in
what the Pulumi program declares (under mocks), so neither can drift from the table.

Variants cover the paths the shipped stacks do not take: the teardown identity of a vLLM-only stack
with the NetworkPolicy option on, and one with stack secrets (hfToken, ngcApiKey), whose Secrets
teardown may get/delete by name only.
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import pytest
import yaml
from test_secrets_program import run_program

from components.compile import compile_stack
from components.config import load_stack_config, read_stack_file

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {p.name.split(".")[1]: p for p in sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))}
RBAC_KINDS = ("Role", "ClusterRole")
BINDING_KINDS = ("RoleBinding", "ClusterRoleBinding")

TEARDOWN = ("get", "list", "watch", "delete")
READ = ("get", "list", "watch")


def rule(groups, resources, verbs, names=()):
    return (frozenset(groups), frozenset(resources), frozenset(verbs), frozenset(names), frozenset())


TEARDOWN_CORE = (
    rule([""], ["persistentvolumeclaims", "pods", "services"], TEARDOWN),
    rule(["apps"], ["deployments"], TEARDOWN),
    rule(["batch"], ["jobs"], TEARDOWN),
)
TEARDOWN_NIM = rule(["apps.nvidia.com"], ["nimcaches", "nimservices"], TEARDOWN)
TEARDOWN_NETWORK_POLICIES = rule(["networking.k8s.io"], ["networkpolicies"], TEARDOWN)
TEARDOWN_MONITORS = rule(["monitoring.coreos.com"], ["servicemonitors"], TEARDOWN)  # platform.metrics
TEARDOWN_BUDGETS = rule(["policy"], ["poddisruptionbudgets"], TEARDOWN)  # models that may run several pods
TEARDOWN_SCALERS = rule(["keda.sh"], ["scaledobjects"], TEARDOWN)  # autoscaled models


def teardown_secrets(*names):
    """The stack's own Secrets: get/delete by name; list/watch namespace-wide, which the provider's
    delete await (an unfiltered informer) needs — tests/faults/test_fault_teardown_identity.py."""
    return (rule([""], ["secrets"], ["get", "delete"], names), rule([""], ["secrets"], ["list", "watch"]))


ENDPOINTSLICES = rule(["discovery.k8s.io"], ["endpointslices"], READ)
# The router's own Role (llm-request-router chart 0.16.2 templates/rbac.yaml: pods list/watch).
POD_READER = rule([""], ["pods"], ["list", "watch"])


def pod_reader(namespace="llm-serving", router="llm-router"):
    return {("Role", namespace, f"{router}-pod-reader"): (POD_READER,)}


def pod_reader_binding(namespace="llm-serving", router="llm-router"):
    return {("RoleBinding", namespace, f"{router}-pod-reader"): (
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{router}-pod-reader"},
        [{"kind": "ServiceAccount", "name": router, "namespace": namespace}])}


# (kind, namespace or None, name) -> the exact rules.
EXPECTED = {
    "gpu-cluster": {
        # networkPolicy, metrics and an autoscaled model in the shipped gpu-cluster stack: teardown
        # removes the policies, the models' ServiceMonitors, the budget and the ScaledObject too.
        ("Role", "llm-serving", "llm-serving-teardown"): (
            *TEARDOWN_CORE, TEARDOWN_NIM, TEARDOWN_NETWORK_POLICIES, TEARDOWN_MONITORS, TEARDOWN_BUDGETS,
            TEARDOWN_SCALERS),
        ("Role", "llm-serving", "llm-router-backend-router-endpointslice-reader"): (ENDPOINTSLICES,),
        **pod_reader(),
    },
    "local": pod_reader(),
    "render": {},
    # The guides' tour: a NIM raw-path model, a two-replica one (its budget), network policies.
    "tour": {
        ("Role", "llm-serving-tour", "llm-serving-teardown"): (
            *TEARDOWN_CORE, TEARDOWN_NIM, TEARDOWN_NETWORK_POLICIES, TEARDOWN_BUDGETS),
        **pod_reader("llm-serving-tour"),
    },
}
# (kind, namespace, name) -> (roleRef, subjects)
EXPECTED_BINDINGS = {
    "gpu-cluster": {
        ("RoleBinding", "llm-serving", "llm-serving-teardown"): (
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "llm-serving-teardown"},
            [{"kind": "ServiceAccount", "name": "llm-serving-teardown", "namespace": "llm-serving"}]),
        ("RoleBinding", "llm-serving", "llm-router-backend-router-endpointslice-reader"): (
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
             "name": "llm-router-backend-router-endpointslice-reader"},
            [{"kind": "ServiceAccount", "name": "llm-router-backend-router", "namespace": "llm-serving"}]),
        **pod_reader_binding(),
    },
    "local": pod_reader_binding(),
    "render": {},
    "tour": {
        ("RoleBinding", "llm-serving-tour", "llm-serving-teardown"): (
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "llm-serving-teardown"},
            [{"kind": "ServiceAccount", "name": "llm-serving-teardown", "namespace": "llm-serving-tour"}]),
        **pod_reader_binding("llm-serving-tour"),
    },
}

MODEL = {"name": "chat", "source": {"repo": "acme/chat"}}
ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.16.2", "replicas": 2}
VARIANTS = {
    "backend-router-in-team-namespace": (
        {"platform": {"namespace": "team-a"}, "models": [MODEL], "router": ROUTER},
        {("Role", "team-a", "llm-router-backend-router-endpointslice-reader"): (ENDPOINTSLICES,),
         **pod_reader("team-a")},
    ),
    "teardown-vllm-with-network-policy": (
        {"platform": {"teardownIdentity": {"enabled": True}, "networkPolicy": {"enabled": True}},
         "models": [MODEL], "router": {"image": ROUTER["image"]}},
        {("Role", "llm-serving", "llm-serving-teardown"): (*TEARDOWN_CORE, TEARDOWN_NETWORK_POLICIES),
         **pod_reader()},
    ),
    # platform.metrics: the models' ServiceMonitors are theirs to delete (not the dashboard
    # ConfigMap: a platform object, like the ServiceAccounts).
    "teardown-with-metrics": (
        {"platform": {"teardownIdentity": {"enabled": True}, "metrics": {"enabled": True}}, "models": [MODEL]},
        {("Role", "llm-serving", "llm-serving-teardown"): (*TEARDOWN_CORE, TEARDOWN_MONITORS)},
    ),
    # Several replicas: the budget; autoscaling: the ScaledObject (and the budget, maxReplicas > 1).
    "teardown-with-replicas": (
        {"platform": {"teardownIdentity": {"enabled": True}},
         "models": [{**MODEL, "replicas": 2, "weights": {"accessMode": "ReadWriteMany"}}]},
        {("Role", "llm-serving", "llm-serving-teardown"): (*TEARDOWN_CORE, TEARDOWN_BUDGETS)},
    ),
    "teardown-autoscaled": (
        {"platform": {"teardownIdentity": {"enabled": True}, "metrics": {"enabled": True}},
         "models": [{**MODEL, "weights": {"accessMode": "ReadWriteMany"},
                     "autoscaling": {"enabled": True, "maxReplicas": 3}}]},
        {("Role", "llm-serving", "llm-serving-teardown"): (
            *TEARDOWN_CORE, TEARDOWN_MONITORS, TEARDOWN_BUDGETS, TEARDOWN_SCALERS)},
    ),
    "teardown-with-stack-secrets": (
        {"platform": {"teardownIdentity": {"enabled": True}}, "hfToken": "hf_exact", "ngcApiKey": "ngc_exact",
         "models": [MODEL, {"name": "nim-chat", "engine": "nim", "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3",
                            "source": {"repo": "acme/chat"}}]},
        {("Role", "llm-serving", "llm-serving-teardown"): (
            *TEARDOWN_CORE, TEARDOWN_NIM, *teardown_secrets("llm-serving-hf-token", "llm-serving-ngc-api-key"))},
    ),
}
SECRET_KEYS = ("hfToken", "ngcApiKey")


def as_stack_file(raw: dict) -> dict:
    """A variant's config as `validate`/`render` read the stack file: stack secrets encrypted."""
    return {k: ({"secure": "v1:exact"} if k in SECRET_KEYS else v) for k, v in raw.items()}


def normalized(rules: list[dict]) -> Counter:
    """A Role's rules as a multiset of (apiGroups, resources, verbs, resourceNames, nonResourceURLs)
    sets: order-free, and a duplicated rule still counts."""
    return Counter(
        (frozenset(r.get("apiGroups", [])), frozenset(r.get("resources", [])), frozenset(r.get("verbs", [])),
         frozenset(r.get("resourceNames", [])), frozenset(r.get("nonResourceURLs", [])))
        for r in rules
    )


def exactly(expected: tuple) -> Counter:
    return Counter(expected)


def rbac_of(manifests: list[dict]) -> dict:
    return {(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]): normalized(m.get("rules") or [])
            for m in manifests if m["kind"] in RBAC_KINDS}


def bindings_of(manifests: list[dict]) -> dict:
    return {(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]): (m["roleRef"], m["subjects"])
            for m in manifests if m["kind"] in BINDING_KINDS}


def assert_exact(found: dict, expected: dict) -> None:
    assert set(found) == set(expected), "a Role was added or removed"
    for key, rules in expected.items():
        assert found[key] == exactly(rules), f"{key}: rules differ"


def test_every_shipped_stack_is_in_the_table():
    assert set(SHIPPED) == set(EXPECTED) == set(EXPECTED_BINDINGS)


@pytest.mark.parametrize("stack", sorted(SHIPPED))
def test_rendered_roles_are_exactly_the_table(stack):
    manifests = compile_stack(load_stack_config(read_stack_file(SHIPPED[stack])))
    assert_exact(rbac_of(manifests), EXPECTED[stack])
    assert bindings_of(manifests) == EXPECTED_BINDINGS[stack]
    # The models' and the router's ServiceAccount is bound to nothing.
    bound = {s["name"] for _, subjects in bindings_of(manifests).values() for s in subjects}
    assert "llm-serving-model" not in bound


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_roles_are_exactly_the_table(variant):
    raw, expected = VARIANTS[variant]
    assert_exact(rbac_of(compile_stack(load_stack_config(as_stack_file(raw)))), expected)


def _declared_roles(config: dict) -> dict:
    recorder, _, _ = run_program(config, secret_keys=[k for k in SECRET_KEYS if k in config])
    found = {}
    for resource in recorder.registered.values():
        kind = resource["type"].rsplit(":", 1)[-1]
        if resource["type"].startswith("kubernetes:rbac.authorization.k8s.io/v1:") and kind in RBAC_KINDS:
            meta = resource["wire"]["metadata"]
            found[(kind, meta.get("namespace"), meta["name"])] = normalized(resource["wire"]["rules"])
    return found


@pytest.mark.parametrize("stack", sorted(SHIPPED))
def test_the_program_declares_exactly_the_table(stack):
    config = yaml.safe_load(SHIPPED[stack].read_text())["config"]
    raw = {key.split(":", 1)[1]: value for key, value in config.items() if key.startswith("llm-serving:")}
    # No hub and no render directory under test: the RBAC objects do not depend on either.
    raw["platform"] = {**raw.get("platform", {}), "preflight": {"enabled": False}}
    raw.get("cluster", {}).pop("renderYamlToDirectory", None)
    assert_exact(_declared_roles(raw), EXPECTED[stack])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_program_declares_exactly_the_variant(variant):
    raw, expected = VARIANTS[variant]
    raw = copy.deepcopy(raw)
    raw["platform"] = {**raw.get("platform", {}), "preflight": {"enabled": False}}
    assert_exact(_declared_roles(raw), expected)


@pytest.mark.parametrize("mutation", ["extra-verb", "wildcard-verb", "extra-resource", "extra-group",
                                      "extra-rule", "resource-names"])
def test_one_extra_grant_fails_the_comparison(mutation):
    manifests = compile_stack(load_stack_config(read_stack_file(SHIPPED["gpu-cluster"])))
    role = next(m for m in manifests if m["kind"] == "Role" and m["metadata"]["name"] == "llm-serving-teardown")
    rules = role["rules"]
    if mutation == "extra-verb":
        rules[0]["verbs"].append("create")
    elif mutation == "wildcard-verb":
        rules[1]["verbs"] = ["*"]
    elif mutation == "extra-resource":
        rules[0]["resources"].append("configmaps")
    elif mutation == "extra-group":
        rules[1]["apiGroups"].append("extensions")
    elif mutation == "extra-rule":
        rules.append({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]})
    else:
        rules[0]["resourceNames"] = ["x"]
    with pytest.raises(AssertionError):
        assert_exact(rbac_of(manifests), EXPECTED["gpu-cluster"])


def _secrets_variant_rules():
    raw, expected = VARIANTS["teardown-with-stack-secrets"]
    manifests = compile_stack(load_stack_config(as_stack_file(raw)))
    role = next(m for m in manifests if m["kind"] == "Role" and m["metadata"]["name"] == "llm-serving-teardown")
    assert_exact(rbac_of(manifests), expected)  # the unmutated control passes
    return manifests, role["rules"], expected


@pytest.mark.parametrize("mutation", ["all-secrets-back", "named-secret-listed", "foreign-secret-named",
                                      "get-on-every-secret"])
def test_a_wider_secrets_grant_fails_the_comparison(mutation):
    manifests, rules, expected = _secrets_variant_rules()
    named = next(r for r in rules if r.get("resourceNames"))
    listed = next(r for r in rules if "secrets" in r["resources"] and not r.get("resourceNames"))
    if mutation == "all-secrets-back":  # the Role before Secrets were limited by name
        rules[:] = [r for r in rules if "secrets" not in r["resources"]]
        rules[0]["resources"].append("secrets")
    elif mutation == "named-secret-listed":
        named["verbs"] += ["list", "watch"]
    elif mutation == "foreign-secret-named":
        named["resourceNames"].append("registry-credentials")
    else:
        listed["verbs"].append("get")
    with pytest.raises(AssertionError):
        assert_exact(rbac_of(manifests), expected)

