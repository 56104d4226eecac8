"""Gateway rules: the OpenAI front door (``router.gateway``) is what makes the router's trusted
request headers trustworthy, so the rules check the three things that keep it so:
- its pods cannot be changed at run time (read-only root filesystem);
- its nginx configuration never forwards the caller's headers (every proxied location sets
  ``proxy_pass_request_headers off``, so only the headers the gateway sets reach the router);
- once a gateway runs and the router has a NetworkPolicy, the router's HTTP port is not open to
  every pod (a client beside the gateway could otherwise send its own ``x-routing-key``);
- once the gateway checks API keys, a NetworkPolicy exists that admits the router's HTTP port
  only from the gateway pods (without one every pod walks around the keys).

Convention: the gateway's Deployment is labelled `app.kubernetes.io/component: gateway`; it
mounts its files from a ConfigMap with the key ``nginx.conf``, and with API keys the key file
from a Secret (the only Secret its pods mount).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .base import resource_rule, stack_rule
from .kube import (
    COMPONENT_LABEL,
    ROUTER,
    UNKNOWN,
    Finding,
    K8sObject,
    Stack,
    as_list,
    get,
    labelled,
    pod_containers,
    unchecked,
    unknowns,
    violation,
)

GATEWAY = "gateway"
ROUTER_HTTP_PORT = 8000


@resource_rule(
    "llm-serving-gateway-read-only-root",
    "Gateway pods (app.kubernetes.io/component: gateway) must run every container with "
    "readOnlyRootFilesystem: true: the gateway holds the API-key check and sets the headers the "
    "router trusts, so nothing may rewrite its files at run time.",
    ("Deployment",),
    fix="Set securityContext.readOnlyRootFilesystem: true (nginx writes only to its /tmp emptyDir), "
    "as the gateway component renders it.",
    severity="high",
)
def read_only_root(obj: K8sObject, config: dict) -> Iterator[Finding]:
    component, findings = labelled(obj, COMPONENT_LABEL, "component")
    yield from findings
    if component != GATEWAY:
        return
    refs, _, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    for ref in refs:
        value = get(ref.container, "securityContext", "readOnlyRootFilesystem")
        if value is UNKNOWN:
            yield unchecked(f"{obj.display}: {ref.path}.securityContext.readOnlyRootFilesystem")
        elif value is not True:
            yield violation(f"{obj.display}: {ref.path} has a writable root filesystem; set its "
                            "securityContext.readOnlyRootFilesystem: true")


def _config_maps_of(obj: K8sObject) -> tuple[list[str], bool]:
    """Names of the ConfigMaps the pods mount, and whether some volume is not known yet."""
    _, spec = obj.pod_spec()
    volumes = as_list(get(spec, "volumes", default=[]))
    if volumes is UNKNOWN:
        return [], True
    names, unknown = [], False
    for volume in volumes:
        name = get(volume, "configMap", "name")
        if name is UNKNOWN:
            unknown = True
        elif isinstance(name, str):
            names.append(name)
    return names, unknown


_PROXY_LOCATION = re.compile(r"location\s+[^{]*\{([^{}]*)\}", re.S)


def _forwarding_locations(conf: str) -> list[str]:
    """The headers of the locations that proxy without ``proxy_pass_request_headers off``."""
    found = []
    for match in _PROXY_LOCATION.finditer(conf):
        body = match.group(1)
        if re.search(r"^\s*proxy_pass\s", body, re.M) and not re.search(
                r"^\s*proxy_pass_request_headers\s+off\s*;", body, re.M):
            found.append(conf[match.start():conf.index("{", match.start())].strip())
    return found


@stack_rule(
    "llm-serving-gateway-strips-caller-headers",
    "The gateway's nginx.conf (the ConfigMap its Deployment mounts) must set "
    "proxy_pass_request_headers off in every location that proxies to the router: the router "
    "trusts x-routing-key, x-model, x-priority and the other contract headers, and only the "
    "headers the gateway sets itself may reach it.",
    fix="Render the gateway's files with the gateway component, or add proxy_pass_request_headers off "
    "and set each header explicitly.",
    severity="critical",
)
def strips_caller_headers(stack: Stack, config: dict) -> Iterator[Finding]:
    maps: dict = {}
    undecided = False  # a ConfigMap whose name or namespace is not known yet could be the one
    gateways = []
    for resource, obj in stack.k8s_objects():
        if obj.kind == "ConfigMap":
            key = (obj.namespace, get(obj.props, "metadata", "name"))
            if UNKNOWN in key:
                undecided = True
            else:
                maps[key] = (resource, obj)
        elif obj.kind == "Deployment":
            component, findings = labelled(obj, COMPONENT_LABEL, "component")
            yield from (Finding(f.message, resource.urn, True) for f in findings)
            if component == GATEWAY:
                gateways.append((resource, obj))
    for gateway_resource, obj in gateways:
        names, unknown = _config_maps_of(obj)
        if unknown or obj.namespace is UNKNOWN:
            yield unchecked(f"{obj.display}: the ConfigMaps it mounts", gateway_resource.urn)
            continue
        for name in names:
            entry = maps.get((obj.namespace, name))
            if entry is None:
                if undecided:
                    yield unchecked(f"{obj.display}: ConfigMap '{name}'", gateway_resource.urn)
                continue
            resource, config_map = entry
            conf = get(config_map.props, "data", "nginx.conf")
            if conf is UNKNOWN:
                yield unchecked(f"{config_map.display}: data.nginx.conf", resource.urn)
            elif isinstance(conf, str):
                for location in _forwarding_locations(conf):
                    yield violation(f"{config_map.display} (mounted by {obj.display}): '{location}' proxies "
                                    "the caller's headers; add proxy_pass_request_headers off", resource.urn)


def _selects_router(policy: K8sObject) -> bool:
    labels = get(policy.props, "spec", "podSelector", "matchLabels", default={})
    return isinstance(labels, dict) and isinstance(labels.get(COMPONENT_LABEL), str) and \
        labels[COMPONENT_LABEL] == ROUTER


def _open_http_rules(policy: K8sObject) -> Iterator[Any]:
    """Indexes of ingress rules that admit port 8000 from every source; ``UNKNOWN`` for a rule
    (or the list) not known yet."""
    rules = as_list(get(policy.props, "spec", "ingress", default=[]))
    if rules is UNKNOWN:
        yield UNKNOWN
        return
    for index, rule in enumerate(rules):
        sources, ports = get(rule, "from"), get(rule, "ports")
        if sources is UNKNOWN or ports is UNKNOWN:
            yield UNKNOWN
            continue
        if sources not in (None, []):
            continue
        numbers = [get(p, "port") for p in (as_list(ports) if ports is not None else [])]
        if any(n is UNKNOWN for n in numbers):
            yield UNKNOWN
        elif not numbers or ROUTER_HTTP_PORT in numbers or "http" in numbers:
            yield index


@stack_rule(
    "llm-serving-router-behind-gateway",
    "When a gateway Deployment (app.kubernetes.io/component: gateway) runs, a NetworkPolicy of "
    "the router pods (podSelector app.kubernetes.io/component: router) must not admit the "
    "router's HTTP port 8000 from every source: a client that reaches the router directly sets "
    "the trusted headers itself (x-routing-key, x-model) and bypasses the gateway's API keys.",
    fix="Admit port 8000 only from the gateway pods (and allowFrom), as the router component renders "
    "it with the gateway on.",
    severity="critical",
)
def router_behind_gateway(stack: Stack, config: dict) -> Iterator[Finding]:
    gateway_namespaces = set()
    policies = []
    for resource, obj in stack.k8s_objects():
        if obj.kind == "Deployment" and obj.component is not UNKNOWN and obj.component == GATEWAY \
                and obj.namespace is not UNKNOWN:
            gateway_namespaces.add(obj.namespace)
        elif obj.kind == "NetworkPolicy" and _selects_router(obj):
            policies.append((resource, obj))
    for resource, policy in policies:
        if policy.namespace is UNKNOWN or policy.namespace not in gateway_namespaces:
            continue
        for index in _open_http_rules(policy):
            if index is UNKNOWN:
                yield unchecked(f"{policy.display}: spec.ingress", resource.urn)
                continue
            yield violation(f"{policy.display}: spec.ingress.{index} admits the router's HTTP port from every "
                            "source while a gateway fronts it; admit it only from the gateway pods", resource.urn)


def _mounts_secret(obj: K8sObject) -> Any:
    """Whether the pods mount a Secret volume (the gateway's key file); ``UNKNOWN`` if not known yet."""
    _, spec = obj.pod_spec()
    volumes = as_list(get(spec, "volumes", default=[]))
    if volumes is UNKNOWN:
        return UNKNOWN
    found: Any = False
    for volume in volumes:
        secret = get(volume, "secret")
        if secret is UNKNOWN:
            found = UNKNOWN if found is False else found
        elif secret is not None:
            return True
    return found


def _guards_router_pods(policy: K8sObject) -> Any:
    """Whether the policy isolates the router pods' ingress: its podSelector selects them (an
    empty selector selects every pod) and its policyTypes include Ingress (the default)."""
    selector = get(policy.props, "spec", "podSelector", default={})
    types = get(policy.props, "spec", "policyTypes")
    if selector is UNKNOWN or types is UNKNOWN:
        return UNKNOWN
    labels = get(selector, "matchLabels", default={}) if isinstance(selector, dict) else None
    if labels is UNKNOWN:
        return UNKNOWN
    everything = isinstance(selector, dict) and not labels and not get(selector, "matchExpressions", default=[])
    routers = isinstance(labels, dict) and labels.get(COMPONENT_LABEL) == ROUTER
    ingress_type = types is None or "Ingress" in as_list(types)
    return (everything or routers) and ingress_type


def _is_gateway_peer(peer: Any) -> Any:
    if not isinstance(peer, dict):
        return False
    labels = get(peer, "podSelector", "matchLabels")
    if labels is UNKNOWN or any(get(peer, key) is UNKNOWN for key in ("namespaceSelector", "ipBlock")):
        return UNKNOWN
    # A podSelector alone: pods of the policy's own namespace, here those labelled as the gateway.
    return set(peer) == {"podSelector"} and isinstance(labels, dict) and labels.get(COMPONENT_LABEL) == GATEWAY


def _http_sources_beyond_gateway(policy: K8sObject) -> Iterator[Any]:
    """``(rule index, what else it admits)`` for each ingress rule that opens port 8000 to more
    than the gateway pods; ``UNKNOWN`` for what is not known yet."""
    rules = as_list(get(policy.props, "spec", "ingress", default=[]))
    if rules is UNKNOWN:
        yield UNKNOWN
        return
    for index, rule in enumerate(rules):
        sources, ports = get(rule, "from"), get(rule, "ports")
        if sources is UNKNOWN or ports is UNKNOWN:
            yield UNKNOWN
            continue
        numbers = [get(p, "port") for p in (as_list(ports) if ports is not None else [])]
        if any(n is UNKNOWN for n in numbers):
            yield UNKNOWN
            continue
        if numbers and ROUTER_HTTP_PORT not in numbers and "http" not in numbers:
            continue
        if sources in (None, []):
            yield index, "every source"
            continue
        for peer_index, peer in enumerate(as_list(sources)):
            gateway_peer = _is_gateway_peer(peer)
            if gateway_peer is UNKNOWN:
                yield UNKNOWN
            elif not gateway_peer:
                yield index, f"from.{peer_index}"


@stack_rule(
    "llm-serving-gateway-keys-guard-router",
    "When a gateway Deployment (app.kubernetes.io/component: gateway) checks API keys (its pods "
    "mount the key file from a Secret), its namespace must have a NetworkPolicy selecting the "
    "router pods (app.kubernetes.io/component: router), and every rule of such a policy that "
    "admits the router's HTTP port 8000 must admit only the gateway pods: otherwise any pod "
    "calls the router directly with its own x-routing-key and x-model and the keys are walked "
    "around, platform.networkPolicy off included.",
    fix="Render the router with the router component (it renders that policy whenever "
    "router.gateway.apiKeys is set), or admit port 8000 only from the gateway pods (allowFrom "
    "peers on port 9090, the metrics port).",
    severity="critical",
    url="https://kubernetes.io/docs/concepts/services-networking/network-policies/",
)
def keys_guard_router(stack: Stack, config: dict) -> Iterator[Finding]:
    keyed, policies = [], []
    for resource, obj in stack.k8s_objects():
        if obj.kind == "Deployment" and obj.component is not UNKNOWN and obj.component == GATEWAY:
            mounts = _mounts_secret(obj)
            if mounts is UNKNOWN:
                yield unchecked(f"{obj.display}: whether it mounts API keys", resource.urn)
            elif mounts:
                keyed.append((resource, obj))
        elif obj.kind == "NetworkPolicy":
            policies.append((resource, obj))
    for resource, gateway in keyed:
        namespace = gateway.namespace
        if namespace is UNKNOWN:
            yield unchecked(f"{gateway.display}: metadata.namespace", resource.urn)
            continue
        guarding, undecided = [], False
        for policy_resource, policy in policies:
            guards = _guards_router_pods(policy)
            if policy.namespace is UNKNOWN or guards is UNKNOWN:
                undecided = undecided or policy.namespace is UNKNOWN or policy.namespace == namespace
            elif policy.namespace == namespace and guards:
                guarding.append((policy_resource, policy))
        if not guarding:
            if undecided:
                yield unchecked(f"{gateway.display}: the NetworkPolicies of the router pods", resource.urn)
            else:
                yield violation(f"{gateway.display} checks API keys, but no NetworkPolicy in namespace "
                                f"'{namespace}' restricts the router pods' HTTP port: any pod can call the "
                                "router directly and skip the keys; admit port 8000 only from the gateway "
                                "pods", resource.urn)
            continue
        for policy_resource, policy in guarding:
            for found in _http_sources_beyond_gateway(policy):
                if found is UNKNOWN:
                    yield unchecked(f"{policy.display}: spec.ingress", policy_resource.urn)
                    continue
                index, what = found
                yield violation(f"{policy.display}: spec.ingress.{index} admits the router's HTTP port from "
                                f"{what}, not only the gateway pods, while {gateway.display} checks API keys; "
                                "admit port 8000 only from the gateway pods", policy_resource.urn)
