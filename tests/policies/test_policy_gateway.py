"""Gateway rules: a read-only root, caller headers never forwarded, the router's HTTP port
closed to everyone but the gateway once a gateway fronts it, and with API keys a policy that
admits it only from the gateway."""

from __future__ import annotations

import pytest

from policies.rules import gateway
from policies.rules.base import violations
from policies.rules.kube import UNKNOWN
from tests.support.policy_helpers import STACK, Case, World, check_case, compiled_manifests, compliant, messages, run

ROUTER_LABELS = {"app.kubernetes.io/name": "llm-router", "app.kubernetes.io/component": "router"}


def _gateway(world):
    return world.one("Deployment", "gateway")


def _conf(world):
    return world.get("ConfigMap", "llm-router-gateway-config")["data"]


def _forward_headers(world):
    data = _conf(world)
    data["nginx.conf"] = data["nginx.conf"].replace("proxy_pass_request_headers off;", "proxy_pass_request_headers on;", 1)


def _open_router(world, rule=None):
    world.manifests.append({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "llm-router-ingress", "namespace": "llm-serving"},
        "spec": {"podSelector": {"matchLabels": dict(ROUTER_LABELS)}, "policyTypes": ["Ingress"],
                 "ingress": [rule or {"ports": [{"protocol": "TCP", "port": 8000}]}]}})


FAIL_CASES = [
    Case(gateway.read_only_root, "writable root",
         lambda w: _gateway(w)["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
             readOnlyRootFilesystem=False),
         "containers[0] (gateway) has a writable root filesystem; set its securityContext.readOnlyRootFilesystem: true"),
    Case(gateway.read_only_root, "setting removed",
         lambda w: _gateway(w)["spec"]["template"]["spec"]["containers"][0]["securityContext"].pop(
             "readOnlyRootFilesystem"), "has a writable root filesystem"),
    Case(gateway.strips_caller_headers, "one location forwards the caller's headers", _forward_headers,
         "'location @gw_stream' proxies the caller's headers"),
    Case(gateway.strips_caller_headers, "the setting deleted everywhere",
         lambda w: _conf(w).update({"nginx.conf": _conf(w)["nginx.conf"].replace("proxy_pass_request_headers off;", "")}),
         "'location @gw_fold' proxies the caller's headers"),
    Case(gateway.router_behind_gateway, "router HTTP open to every source", _open_router,
         "spec.ingress.0 admits the router's HTTP port from every source"),
    Case(gateway.router_behind_gateway, "a rule with no ports opens every port",
         lambda w: _open_router(w, {}), "admits the router's HTTP port from every source"),
]

# The gateway checks API keys and platform.networkPolicy is off (the default): the router
# component renders the router's policy all the same, HTTP from the gateway pods only.
KEYED = {**STACK, "router": {**STACK["router"], "gateway": {
    "apiKeys": {"secretName": "gateway-keys", "tenants": [{"name": "team-a"}]}}}}


def _router_policy(world):
    return world.get("NetworkPolicy", "llm-router-ingress")


def _http_rule(world):
    return _router_policy(world)["spec"]["ingress"][0]


def keyed(case_id, mutate, expect):
    return Case(gateway.keys_guard_router, case_id, mutate, expect, raw=KEYED)


FAIL_CASES += [
    # What the router component rendered before: no policy unless platform.networkPolicy.
    keyed("no router policy (the old render)", lambda w: w.remove(_router_policy(w)),
          "checks API keys, but no NetworkPolicy in namespace 'llm-serving' restricts the router pods' HTTP port"),
    keyed("HTTP open to every source", lambda w: _http_rule(w).pop("from"),
          "spec.ingress.0 admits the router's HTTP port from every source"),
    keyed("HTTP also from allowFrom's namespace", lambda w: _http_rule(w)["from"].append(
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}),
          "spec.ingress.0 admits the router's HTTP port from from.1, not only the gateway pods"),
    keyed("HTTP from every pod of the namespace", lambda w: _http_rule(w)["from"][0]["podSelector"].update(
        matchLabels={}), "spec.ingress.0 admits the router's HTTP port from from.0"),
    keyed("the open ports' rule loses its ports", lambda w: _router_policy(w)["spec"]["ingress"][1].pop("ports"),
          "spec.ingress.1 admits the router's HTTP port from every source"),
    keyed("the policy selects other pods", lambda w: _router_policy(w)["spec"]["podSelector"]["matchLabels"].update(
        {"app.kubernetes.io/component": "gateway"}), "no NetworkPolicy in namespace 'llm-serving'"),
    keyed("the policy guards egress only", lambda w: _router_policy(w)["spec"].update(policyTypes=["Egress"]),
          "no NetworkPolicy in namespace 'llm-serving'"),
    keyed("the policy is in another namespace", lambda w: _router_policy(w)["metadata"].update(namespace="other"),
          "no NetworkPolicy in namespace 'llm-serving'"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


@pytest.mark.parametrize("rule", [gateway.read_only_root, gateway.strips_caller_headers,
                                  gateway.router_behind_gateway, gateway.keys_guard_router], ids=lambda r: r.name)
def test_compiled_stack_passes(rule):
    assert run(rule, compliant()) == []


def test_the_compiled_policies_with_network_policy_on_pass():
    raw = {**STACK, "platform": {**STACK["platform"], "networkPolicy": {"enabled": True}}}
    world = World(compiled_manifests(raw))
    assert [m for m in world.manifests if m["kind"] == "NetworkPolicy" and m["metadata"]["name"] == "llm-router-ingress"]
    assert run(gateway.router_behind_gateway, world) == []


def test_without_a_gateway_an_open_router_is_its_own_front_door():
    world = compliant()
    world.remove(_gateway(world))
    _open_router(world)
    assert run(gateway.router_behind_gateway, world) == []


def test_a_rule_with_sources_is_not_open():
    world = compliant()
    _open_router(world, {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}}}],
                         "ports": [{"protocol": "TCP", "port": 8000}]})
    assert run(gateway.router_behind_gateway, world) == []


def test_an_unknown_config_is_unchecked_not_a_violation():
    world = compliant()
    _conf(world)["nginx.conf"] = UNKNOWN
    findings = run(gateway.strips_caller_headers, world)
    assert findings and not violations(findings)


@pytest.mark.parametrize("network_policy", [False, True], ids=["networkPolicy-off", "networkPolicy-on"])
@pytest.mark.parametrize("rendering", [False, True], ids=["cluster", "rendering"])
def test_a_keyed_gateway_as_compiled_passes_every_rule(rendering, network_policy):
    """The router component's own render holds the keys rule, and the rest of the pack holds it."""
    from policies.rules import ALL_RULES

    raw = {**KEYED, "platform": {**KEYED["platform"], "networkPolicy": {"enabled": network_policy}}}
    world = compliant(rendering, raw)
    assert _router_policy(world)
    for rule in ALL_RULES:
        assert run(rule, world) == [], f"{rule.name}: {messages(run(rule, world))}"


def test_a_keyless_gateway_needs_no_router_policy():
    world = compliant()
    assert not [m for m in world.manifests if m["kind"] == "NetworkPolicy"]
    assert run(gateway.keys_guard_router, world) == []


def test_an_unknown_volume_list_is_unchecked_not_a_violation():
    world = compliant(raw=KEYED)
    world.remove(_router_policy(world))
    _gateway(world)["spec"]["template"]["spec"]["volumes"] = UNKNOWN
    findings = run(gateway.keys_guard_router, world)
    assert findings and not violations(findings)
