"""NetworkPolicies of the router and backend router pods (``platform.networkPolicy.enabled``).

What each pod must accept, and from whom (ports: chart 0.16.2 values.yaml):
- router: HTTP 8000 from the gateway pods and ``allowFrom`` when the gateway runs (the router
  trusts the contract headers, which only the gateway sets safely), else from anywhere; with the
  gateway's API keys, from the gateway pods only (an ``allowFrom`` peer would call the router
  with its own ``x-routing-key`` and walk around the keys; Prometheus scrapes 9090, not 8000);
  gRPC 50071/TCP and QUIC 50072/UDP only from the pylons in the model pods, the backend router
  and its peer router pods; metrics 9090 only from ``allowFrom`` (Prometheus).
  Egress stays open: Stargate may be pointed at endpoints (``args``) this program cannot know.
- API keys on and ``platform.networkPolicy`` off: the router's policy is rendered all the same
  (secure by default: keys a pod beside the gateway could skip are no keys), limited to what the
  keys need: HTTP 8000 from the gateway pods only, the router's other ports (gRPC, QUIC, metrics)
  from anywhere, as without a policy. The backend router's policy stays with the option.
- backend router: gRPC 50071/TCP and QUIC 50072/UDP from the pylons; health/metrics 8080 from
  ``allowFrom``. Egress only to the router pods' gRPC and QUIC ports, to the Kubernetes API
  (TCP 443 and 6443: the Service and a typical apiserver port; the apiserver is not a pod a
  selector could name) for its EndpointSlice watch, and to DNS.
Kubelet probes come from the node and are not subject to these policies on common CNIs.
"""

from __future__ import annotations

from typing import Optional

from ...config.stack import StackConfig
from .. import common
from ..network import allowed_peers
from .names import (
    BACKEND_COMPONENT,
    BACKEND_GRPC_PORT,
    BACKEND_HEALTH_PORT,
    BACKEND_QUIC_PORT,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    POLICY_COMPONENT,
    QUIC_PORT,
    ROUTER_COMPONENT,
    RouterNames,
    metadata,
    selector_labels,
)

# Model server pods (raw and operator paths both carry the model label and component: server):
# the pylon sidecar in them dials the router.
PYLON_PODS = {"matchLabels": {"app.kubernetes.io/component": "server"},
              "matchExpressions": [{"key": common.MODEL_LABEL, "operator": "Exists"}]}
API_SERVER_PORTS = (443, 6443)
# The gateway's pods (compile.gateway imports it from here: the other way would cycle).
GATEWAY_COMPONENT = "gateway"


def _ports(*pairs: tuple[int, str]) -> list[dict]:
    return [{"protocol": protocol, "port": port} for port, protocol in pairs]


def _policy(stack: StackConfig, name: str, component: str, spec: dict) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata(name, stack.platform.namespace, stack.router, POLICY_COMPONENT),
            "spec": {"podSelector": {"matchLabels": selector_labels(stack.router, component)}, **spec}}


def keys_guard_router(stack: StackConfig) -> bool:
    """The gateway checks API keys: the router's HTTP port must then admit the gateway only,
    whatever ``platform.networkPolicy`` says (the router trusts the routing headers it gets)."""
    router = stack.router
    return router is not None and router.gateway.enabled and router.gateway.api_keys is not None


def _gateway_peer(stack: StackConfig) -> dict:
    return {"podSelector": {"matchLabels": selector_labels(stack.router, GATEWAY_COMPONENT)}}


def compile_router_policy(stack: StackConfig, names: RouterNames, backend: bool) -> Optional[dict]:
    keyed = keys_guard_router(stack)
    if not stack.platform.network_policy.enabled:
        if not keyed:
            return None
        # Only the port the keys guard is closed; the others stay open to any source, as they
        # are without platform.networkPolicy (a port no rule lists would be closed by the policy).
        ingress = [{"from": [_gateway_peer(stack)], "ports": _ports((HTTP_PORT, "TCP"))},
                   {"ports": _ports((GRPC_PORT, "TCP"), (QUIC_PORT, "UDP"), (METRICS_PORT, "TCP"))}]
        return _policy(stack, names.policy, ROUTER_COMPONENT, {"policyTypes": ["Ingress"], "ingress": ingress})
    router = stack.router
    tunnel_peers = [{"podSelector": dict(PYLON_PODS)},
                    {"podSelector": {"matchLabels": selector_labels(router, ROUTER_COMPONENT)}}]
    if backend:
        tunnel_peers.append({"podSelector": {"matchLabels": selector_labels(router, BACKEND_COMPONENT)}})
    # HTTP: from anywhere without the gateway; with it, only the gateway and allowFrom (the
    # router trusts its request headers, which only the gateway sets safely); with its API keys,
    # only the gateway (an allowFrom peer would walk around the keys).
    http: dict = {"ports": _ports((HTTP_PORT, "TCP"))}
    if router.gateway.enabled:
        http = {"from": [_gateway_peer(stack), *([] if keyed else allowed_peers(stack))], **http}
    ingress = [
        http,
        {"from": tunnel_peers, "ports": _ports((GRPC_PORT, "TCP"), (QUIC_PORT, "UDP"))},
    ]
    monitors = allowed_peers(stack)
    if monitors:
        ingress.append({"from": monitors, "ports": _ports((METRICS_PORT, "TCP"))})
    return _policy(stack, names.policy, ROUTER_COMPONENT, {"policyTypes": ["Ingress"], "ingress": ingress})


def compile_backend_policy(stack: StackConfig, names: RouterNames) -> Optional[dict]:
    if not stack.platform.network_policy.enabled:
        return None
    router = stack.router
    ingress = [{"from": [{"podSelector": dict(PYLON_PODS)}],
                "ports": _ports((BACKEND_GRPC_PORT, "TCP"), (BACKEND_QUIC_PORT, "UDP"))}]
    monitors = allowed_peers(stack)
    if monitors:
        ingress.append({"from": monitors, "ports": _ports((BACKEND_HEALTH_PORT, "TCP"))})
    egress = [
        {"to": [{"podSelector": {"matchLabels": selector_labels(router, ROUTER_COMPONENT)}}],
         "ports": _ports((GRPC_PORT, "TCP"), (QUIC_PORT, "UDP"))},
        {"ports": _ports(*((port, "TCP") for port in API_SERVER_PORTS))},
        {"ports": _ports((53, "UDP"), (53, "TCP"))},
    ]
    return _policy(stack, names.backend_policy, BACKEND_COMPONENT,
                   {"policyTypes": ["Ingress", "Egress"], "ingress": ingress, "egress": egress})
