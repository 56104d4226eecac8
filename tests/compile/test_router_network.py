"""NetworkPolicies of the router and backend router (`platform.networkPolicy.enabled`).

Checked by what they do: a small evaluator of NetworkPolicy rules (same-namespace podSelector,
matchLabels + matchExpressions Exists, ports with protocol) is asked about the pods the stack
itself renders, labelled as its compilers label them.
"""

from __future__ import annotations

from typing import Optional

import pytest

from components.compile import compile_stack
from components.compile.gateway import compile_gateway
from components.compile.router import compile_router
from components.config import load_stack_config
from tests.support.builders import model
from tests.support.kube_schema import assert_valid_kubernetes

IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}


def stack(enabled=True, allow_from=None, **router):
    policy = {"enabled": enabled}
    if allow_from is not None:
        policy["allowFrom"] = allow_from
    return load_stack_config({"platform": {"networkPolicy": policy}, "models": [model("chat")],
                              "router": {"image": IMAGE, **router}})


def pods(raw) -> dict[str, dict]:
    return {m["metadata"]["name"]: m["spec"]["template"]["metadata"]["labels"]
            for m in compile_stack(raw) if m["kind"] in ("Deployment", "StatefulSet")}


def selects(selector: dict, labels: dict) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "Exists", "evaluator knows Exists only"
        if expression["key"] not in labels:
            return False
    return True


def peer_matches(peer: dict, labels: Optional[dict], namespace: Optional[dict]) -> bool:
    """``labels``: a pod of the stack's namespace; ``namespace``: labels of another namespace
    (any pod there); None for an address outside the cluster's pods."""
    if "namespaceSelector" in peer:
        return namespace is not None and selects(peer["namespaceSelector"], namespace) and (
            "podSelector" not in peer)
    if "podSelector" in peer:
        return labels is not None and selects(peer["podSelector"], labels)
    return False


def allowed(rules: list[dict], key: str, port: int, protocol: str, labels=None, namespace=None) -> bool:
    for rule in rules:
        if not any(p["port"] == port and p["protocol"] == protocol for p in rule.get("ports", [])):
            continue
        peers = rule.get(key)
        if peers is None or any(peer_matches(p, labels, namespace) for p in peers):
            return True
    return False


def ingress(policy, port, protocol="TCP", labels=None, namespace=None):
    return allowed(policy["spec"]["ingress"], "from", port, protocol, labels, namespace)


def egress(policy, port, protocol="TCP", labels=None):
    return allowed(policy["spec"]["egress"], "to", port, protocol, labels)


def test_no_router_policies_while_the_option_is_off():
    objects = compile_router(stack(enabled=False, replicas=2))
    assert objects.network_policy is None and objects.backend_network_policy is None


def test_router_policy_selects_the_router_pods_only():
    raw = stack(replicas=2)
    objects, labels = compile_router(raw), pods(raw)
    selector = objects.network_policy["spec"]["podSelector"]
    assert selects(selector, labels["llm-router"])
    assert not selects(selector, labels["llm-router-backend-router"]) and not selects(selector, labels["chat"])
    assert objects.network_policy["spec"]["policyTypes"] == ["Ingress"]


def test_without_the_gateway_clients_reach_http_from_anywhere_and_nothing_else_is_open():
    policy = compile_router(stack(gateway={"enabled": False})).network_policy
    assert ingress(policy, 8000)  # no pod, no namespace: any client
    for port, protocol in ((50071, "TCP"), (50072, "UDP"), (9090, "TCP")):
        assert not ingress(policy, port, protocol, labels={"app": "stranger"}), port
    assert not ingress(policy, 8000, "UDP")


def test_pylons_backend_router_and_peers_reach_grpc_and_quic():
    raw = stack(replicas=2)
    policy, labels = compile_router(raw).network_policy, pods(raw)
    for source in ("chat", "llm-router-backend-router", "llm-router"):
        assert ingress(policy, 50071, "TCP", labels=labels[source]), source
        assert ingress(policy, 50072, "UDP", labels=labels[source]), source
    assert not ingress(policy, 50072, "TCP", labels=labels["chat"])  # QUIC is UDP only


def test_only_allowed_peers_scrape_metrics():
    raw = stack()
    policy, labels = compile_router(raw).network_policy, pods(raw)
    assert ingress(policy, 9090, namespace=MONITORING)
    assert not ingress(policy, 9090, labels=labels["chat"])
    closed = compile_router(stack(allow_from=[])).network_policy
    assert not ingress(closed, 9090, namespace=MONITORING)


def test_backend_router_policy_ingress_and_egress():
    raw = stack(replicas=2)
    policy, labels = compile_router(raw).backend_network_policy, pods(raw)
    assert selects(policy["spec"]["podSelector"], labels["llm-router-backend-router"])
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert ingress(policy, 50071, "TCP", labels=labels["chat"]) and ingress(policy, 50072, "UDP", labels=labels["chat"])
    assert not ingress(policy, 50071, "TCP", labels={"app": "stranger"})
    assert ingress(policy, 8080, namespace=MONITORING) and not ingress(policy, 8080, labels=labels["chat"])
    # Out: the router pods' gRPC and QUIC, the API server for the EndpointSlice watch, DNS.
    assert egress(policy, 50071, "TCP", labels["llm-router"]) and egress(policy, 50072, "UDP", labels["llm-router"])
    assert not egress(policy, 50071, "TCP", labels["chat"])
    assert egress(policy, 443) and egress(policy, 6443)
    assert egress(policy, 53, "UDP") and egress(policy, 53, "TCP")
    assert not egress(policy, 8000)


@pytest.mark.parametrize("router", [{}, {"workload": {"kind": "StatefulSet"}, "replicas": 2}])
def test_no_backend_policy_without_a_backend_router(router):
    objects = compile_router(stack(**router))
    assert objects.network_policy is not None and objects.backend_network_policy is None


def test_the_model_policy_still_admits_the_pylon_side_router():
    """The models' own policy (compile/network.py) keeps admitting the router pods."""
    raw = stack()
    model_policy = next(m for m in compile_stack(raw) if m["kind"] == "NetworkPolicy"
                        and m["metadata"]["name"] == "chat-ingress")
    assert any(selects(p["podSelector"], pods(raw)["llm-router"])
               for p in model_policy["spec"]["ingress"][0]["from"] if "podSelector" in p)


def test_with_the_gateway_only_the_gateway_and_allowed_peers_reach_http():
    """The router trusts x-model, x-routing-key and the other contract headers: once the gateway
    sets them, a client beside it must not reach the router and set its own."""
    raw = stack()
    policy, labels = compile_router(raw).network_policy, pods(raw)
    assert ingress(policy, 8000, labels=labels["llm-router-gateway"])
    assert ingress(policy, 8000, namespace=MONITORING)
    assert not ingress(policy, 8000)
    assert not ingress(policy, 8000, labels={"app": "stranger"})
    assert not ingress(policy, 8000, labels=labels["chat"])


def test_gateway_policy_lets_clients_in_and_only_the_router_out():
    raw = stack()
    policy, labels = compile_gateway(raw).network_policy, pods(raw)
    assert selects(policy["spec"]["podSelector"], labels["llm-router-gateway"])
    assert not selects(policy["spec"]["podSelector"], labels["llm-router"])
    assert ingress(policy, 8080)  # the front door: any client
    assert ingress(policy, 8081, namespace=MONITORING) and not ingress(policy, 8081)
    assert egress(policy, 8000, labels=labels["llm-router"])
    assert not egress(policy, 8000, labels=labels["chat"])  # never straight to a model
    assert egress(policy, 53, "UDP")
    assert compile_gateway(stack(enabled=False)).network_policy is None


# --- API keys on: the router's HTTP port admits the gateway only (issue 29 item 2) ---------------

KEYS = {"apiKeys": {"secretName": "gateway-keys", "tenants": [{"name": "team-a"}]}}
STRANGER = {"app": "curl"}


def cluster_admits(objects: list[dict], target: dict, port: int, protocol="TCP", labels=None, namespace=None) -> bool:
    """What a cluster enforcing NetworkPolicy does with every policy the stack renders: a pod no
    Ingress policy selects admits every connection; a selected pod, what one of its policies'
    rules admits (policies add up)."""
    guarding = [m for m in objects if m["kind"] == "NetworkPolicy" and "Ingress" in m["spec"]["policyTypes"]
                and selects(m["spec"]["podSelector"], target)]
    return not guarding or any(ingress(p, port, protocol, labels, namespace) for p in guarding)


@pytest.mark.parametrize("network_policy", [False, True], ids=["networkPolicy-off", "networkPolicy-on"])
def test_with_api_keys_a_direct_call_to_the_router_is_refused(network_policy):
    """A pod beside the gateway could call the router with its own x-routing-key and x-model and
    skip the keys; with keys on only the gateway gets in, whatever platform.networkPolicy says
    (the default, off, included)."""
    raw = stack(enabled=network_policy, gateway=KEYS, replicas=2)
    objects, labels = compile_stack(raw), pods(raw)
    router = labels["llm-router"]
    assert cluster_admits(objects, router, 8000, labels=labels["llm-router-gateway"])
    for source in ("chat", "llm-router-backend-router", "llm-router"):
        assert not cluster_admits(objects, router, 8000, labels=labels[source]), source
    assert not cluster_admits(objects, router, 8000, labels=STRANGER)
    assert not cluster_admits(objects, router, 8000)  # outside the pod network (a node, a LoadBalancer)
    # allowFrom (the monitoring namespace by default) scrapes metrics, never calls the API.
    assert not cluster_admits(objects, router, 8000, namespace=MONITORING)
    assert cluster_admits(objects, router, 9090, namespace=MONITORING)
    # The pylons still register and tunnel.
    assert cluster_admits(objects, router, 50071, "TCP", labels=labels["chat"])
    assert cluster_admits(objects, router, 50072, "UDP", labels=labels["chat"])


def test_with_api_keys_and_the_option_off_only_the_http_port_is_closed():
    """The option off keeps the router's other ports as they were (open): the keys need 8000 only."""
    raw = stack(enabled=False, gateway=KEYS)
    objects = compile_stack(raw)
    router = pods(raw)["llm-router"]
    for port, protocol in ((50071, "TCP"), (50072, "UDP"), (9090, "TCP")):
        assert cluster_admits(objects, router, port, protocol, labels=STRANGER), port
        assert cluster_admits(objects, router, port, protocol), port
    policy = compile_router(raw).network_policy
    assert policy["metadata"]["name"] == "llm-router-ingress" and policy["spec"]["policyTypes"] == ["Ingress"]
    assert compile_router(raw).backend_network_policy is None  # the backend router's stays with the option
    assert_valid_kubernetes(policy)


def test_without_api_keys_and_the_option_off_the_router_keeps_no_policy():
    for gateway in ({}, {"enabled": False}):
        raw = stack(enabled=False, gateway=gateway)
        assert compile_router(raw).network_policy is None
        assert cluster_admits(compile_stack(raw), pods(raw)["llm-router"], 8000, labels=STRANGER)
