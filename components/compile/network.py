"""Network isolation of a model (``platform.networkPolicy``): one ingress NetworkPolicy per
model for its servers, and one egress NetworkPolicy for its weight puller.

Pure: typed config in, wire-shape dicts out. The ingress policy selects the model's server pods
(both paths: the raw Deployment's pods and the pods the NIM operator renders carry the model label
and ``component: server``) and admits TCP on the serving port only from the router's pods in the
stack's namespace and from ``allowFrom``. Server egress is left alone.

The puller policy (raw path; the NIM operator runs its own caching Job) admits nothing in and lets
the puller out to DNS and to the Hugging Face endpoint only. A NetworkPolicy matches addresses, not
host names, and the hub answers downloads with redirects to CDN hosts (cdn-lfs.huggingface.co,
the xet bridge) whose addresses change: so a public endpoint gets its port on every public
address (0.0.0.0/0 minus the private, carrier-grade NAT and link-local ranges, which keeps the
puller off the cluster's own Services and the cloud metadata endpoint); an in-cluster mirror
(``<service>.<namespace>.svc...``) gets the pods of its namespace (any port: a policy sees the
pod's port after the Service translated it, which we cannot know); a literal IP gets that
address on its port. DNS is allowed on port 53 to any address (kube-dns, or a node-local cache
on a link-local address).
"""

from __future__ import annotations

import ipaddress
from typing import Optional
from urllib.parse import urlparse

from contract.labels import LWS_NAME_LABEL, NIM_LWS_SUFFIX

from ..config.model import ModelConfig
from ..config.stack import StackConfig
from . import common

POLICY_COMPONENT = "network-policy"
SERVER_COMPONENT = "server"  # compile.server.SERVER_COMPONENT; imported there from here would cycle
PULLER_COMPONENT = "weights-puller"  # compile.weights.PULLER_COMPONENT
# Not the public internet: RFC 1918, carrier-grade NAT (RFC 6598), link-local (cloud metadata).
NON_PUBLIC_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")
DNS_PORTS = ({"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53})
# The router's pods, as compile.router labels them; part-of keeps out other charts' "router"s.
ROUTER_PODS = {"app.kubernetes.io/component": "router", "app.kubernetes.io/part-of": common.PART_OF}


def policy_name(model: ModelConfig) -> str:
    return f"{model.name}-ingress"  # model names are at most 45 characters


def server_pods(model: ModelConfig) -> dict[str, str]:
    return {common.MODEL_LABEL: model.name, "app.kubernetes.io/component": SERVER_COMPONENT}


def model_pods(model: ModelConfig) -> dict[str, str]:
    """Every server pod of the model. A multi-node NIM model's are the pods of the operator's
    LeaderWorkerSet ``<name>-lws``: the operator merges the NIMService's labels onto its leader
    pods only (k8s-nim-operator v3.1.2 ``manifests/lws.yaml``: the worker template has no labels),
    and the LWS controller labels every pod of the set with the set's name."""
    if model.on_operator and model.multi_node is not None:
        return {LWS_NAME_LABEL: f"{model.name}{NIM_LWS_SUFFIX}"}
    return server_pods(model)


def allowed_peers(stack: StackConfig) -> list[dict]:
    """`platform.networkPolicy.allowFrom` as NetworkPolicy peers (shared with the router's policies)."""
    result = []
    for peer in stack.platform.network_policy.allow_from:
        entry: dict = {}
        if peer.namespace_selector is not None:
            entry["namespaceSelector"] = {"matchLabels": dict(peer.namespace_selector)}
        if peer.pod_selector is not None:
            entry["podSelector"] = {"matchLabels": dict(peer.pod_selector)}
        result.append(entry)
    return result


def peers(stack: StackConfig) -> list[dict]:
    return [{"podSelector": {"matchLabels": dict(ROUTER_PODS)}}, *allowed_peers(stack)]


def compile_model_network_policy(model: ModelConfig, stack: StackConfig) -> Optional[dict]:
    """The model's NetworkPolicy, or None when ``platform.networkPolicy.enabled`` is off."""
    if not stack.platform.network_policy.enabled:
        return None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": common.metadata(policy_name(model), stack.platform.namespace, model, POLICY_COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": model_pods(model)},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": peers(stack),
                "ports": [{"protocol": "TCP", "port": common.SERVER_PORT}],
            }, *_group_ingress(model)],
        },
    }


def _group_ingress(model: ModelConfig) -> list[dict]:
    """multiNode: the pods of a group reach each other on every port. Ray (its GCS port, then
    node-manager, object-manager and worker ports it picks at start), vLLM's data-parallel RPC
    port and NCCL's connections (ports chosen at run time) cannot be listed ahead."""
    if model.multi_node is None:
        return []
    return [{"from": [{"podSelector": {"matchLabels": model_pods(model)}}]}]


def puller_policy_name(model: ModelConfig) -> str:
    return f"{model.name}-puller-egress"


def puller_pods(model: ModelConfig) -> dict[str, str]:
    return {common.MODEL_LABEL: model.name, "app.kubernetes.io/component": PULLER_COMPONENT}


def hub_egress(endpoint: str) -> dict:
    """The egress rule that reaches ``endpoint`` (see the module docstring for why this shape)."""
    url = urlparse(endpoint)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    labels = host.split(".")
    if len(labels) >= 3 and labels[2] == "svc":
        # <service>.<namespace>.svc[.cluster.local]: the mirror's pods, wherever they listen.
        return {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": labels[1]}}}]}
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    tcp = [{"protocol": "TCP", "port": port}]
    if address is not None:
        return {"to": [{"ipBlock": {"cidr": f"{address}/{address.max_prefixlen}"}}], "ports": tcp}
    return {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(NON_PUBLIC_RANGES)}}], "ports": tcp}


def compile_puller_network_policy(model: ModelConfig, stack: StackConfig) -> Optional[dict]:
    """The puller's NetworkPolicy (raw path), or None when ``platform.networkPolicy`` is off or
    there is no puller (a streamed s3 source: the server reads the store, its egress is left alone)."""
    if not stack.platform.network_policy.enabled or model.on_operator or model.streams:
        return None
    # A next revision's puller (models[].next) is the model's own with the revision's source
    # (compile/plan.py weights_names): this policy selects its pods too, and admits its store.
    sources = [model.source, *([model.next.source] if model.next is not None and model.next.source is not None else [])]
    hub = model.hf_endpoint or stack.platform.hf_endpoint
    endpoints = list(dict.fromkeys(endpoint for source in sources
                                   if (endpoint := source.egress_endpoint(hub)) is not None))
    egress: list[dict] = ([{"ports": [dict(p) for p in DNS_PORTS]}, *(hub_egress(e) for e in endpoints)]
                          if endpoints else [])
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": common.metadata(puller_policy_name(model), stack.platform.namespace, model, POLICY_COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": puller_pods(model)},
            # Ingress listed with no rule: nothing may connect to the puller.
            "policyTypes": ["Ingress", "Egress"],
            "egress": egress,
        },
    }
