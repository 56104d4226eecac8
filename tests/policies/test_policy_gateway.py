"""Gateway rules: a read-only root, caller headers never forwarded, and the router's HTTP port
closed to everyone but the gateway once a gateway fronts it."""

from __future__ import annotations

import pytest

from policies.rules import gateway
from policies.rules.base import violations
from policies.rules.kube import UNKNOWN
from tests.support.policy_helpers import STACK, Case, World, check_case, compiled_manifests, compliant, run

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


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


@pytest.mark.parametrize("rule", [gateway.read_only_root, gateway.strips_caller_headers,
                                  gateway.router_behind_gateway], ids=lambda r: r.name)
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
