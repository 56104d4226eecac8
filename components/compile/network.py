"""Ingress isolation of the model servers: one NetworkPolicy per model (``platform.networkPolicy``).

Pure: typed config in, wire-shape dicts out. Each policy selects the model's server pods (both
paths: the raw Deployment's pods and the pods the NIM operator renders carry the model label and
``component: server``) and admits TCP on the serving port only from the router's pods in the
stack's namespace and from ``allowFrom``. Egress and the puller pods are left alone: the puller
listens on nothing, and the server needs no ingress from anywhere else.
"""

from __future__ import annotations

from typing import Optional

from ..config.model import ModelConfig, StackConfig
from . import common

POLICY_COMPONENT = "network-policy"
SERVER_COMPONENT = "server"  # compile.server.SERVER_COMPONENT; imported there from here would cycle
# The router's pods, as compile.router labels them; part-of keeps out other charts' "router"s.
ROUTER_PODS = {"app.kubernetes.io/component": "router", "app.kubernetes.io/part-of": common.PART_OF}


def policy_name(model: ModelConfig) -> str:
    return f"{model.name}-ingress"  # model names are at most 45 characters


def server_pods(model: ModelConfig) -> dict[str, str]:
    return {common.MODEL_LABEL: model.name, "app.kubernetes.io/component": SERVER_COMPONENT}


def peers(stack: StackConfig) -> list[dict]:
    result: list[dict] = [{"podSelector": {"matchLabels": dict(ROUTER_PODS)}}]
    for peer in stack.platform.network_policy.allow_from:
        entry: dict = {}
        if peer.namespace_selector is not None:
            entry["namespaceSelector"] = {"matchLabels": dict(peer.namespace_selector)}
        if peer.pod_selector is not None:
            entry["podSelector"] = {"matchLabels": dict(peer.pod_selector)}
        result.append(entry)
    return result


def compile_model_network_policy(model: ModelConfig, stack: StackConfig) -> Optional[dict]:
    """The model's NetworkPolicy, or None when ``platform.networkPolicy.enabled`` is off."""
    if not stack.platform.network_policy.enabled:
        return None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": common.metadata(policy_name(model), stack.platform.namespace, model, POLICY_COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": server_pods(model)},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": peers(stack),
                "ports": [{"protocol": "TCP", "port": common.SERVER_PORT}],
            }],
        },
    }
