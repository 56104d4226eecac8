"""The gateway (``router.gateway``): the OpenAI front door in front of the request router.

Pure: typed config in, wire-shape dicts out. A stock nginx image with its njs module runs files
rendered here (``nginx``: nginx.conf, gateway.js, gateway_config.js) from a ConfigMap; nothing
else configures it. Objects: ConfigMap, Deployment, Service (the URL clients call), a
PodDisruptionBudget and node spread with more than one replica, and a NetworkPolicy with
``platform.networkPolicy.enabled``. With the gateway on, the router's own NetworkPolicy admits
its HTTP port only from the gateway pods and ``allowFrom``; with API keys, only from the gateway
pods, and that policy is rendered even with ``platform.networkPolicy`` off
(``compile.router.network``).

Limits: with a tenant's ``rateLimit``, the limiter (``limiter.py``, ``limiter_objects.py``) counts
them for all replicas together.

Metrics: each replica counts its requests per tenant and model in an njs shared dictionary and
serves them in Prometheus' text format at ``/metrics`` on the health port (``gateway.js``,
``observe`` / ``metrics``); with ``platform.metrics`` a Service for that port and a
ServiceMonitor (``monitoring``). Each request is also one JSON access-log line, and
``stub_status`` (connection counters) is on the health port.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Optional

from contract.labels import DOMAIN

from ...config.autoscaling import may_sleep
from ...config.gateway import SCRATCH_BYTES, admitted_models
from ...config.revisions import next_name
from ...config.stack import StackConfig, fronted_models
from .. import common
from ..network import allowed_peers
from ..router.backend import CERT_DURATION, CERT_MANAGER_GROUP, CERT_RENEW_BEFORE
from ..router.names import HTTP_PORT as ROUTER_HTTP_PORT
from ..router.names import POLICY_COMPONENT, ROUTER_COMPONENT, in_cluster, labels, selector_labels
from ..router.network import GATEWAY_COMPONENT
from ..router.workload import spread
from .limiter import LIMITER_CONF, LIMITER_PORT, LIMITER_SCRIPT, LIMITER_SETTINGS
from .limiter_objects import LimiterManifests, compile_limiter, limiter_address, limiter_pods
from .monitoring import compile_metrics_service, compile_service_monitor
from .monitoring import required_crds as monitoring_required_crds
from .nginx import CONFIG_DIR, HEALTH_PATH, HEALTH_PORT, HTTP_PORT, KEYS_DIR, SCRATCH_DIR, TLS_DIR, GatewaySettings, render_files
from .resolver import start_command

CONTAINER = "gateway"
# The Service port clients call: the same as the router's and vLLM's (`http://<svc>:8000/v1`).
SERVICE_PORT = 8000
CONFIG_HASH_ANNOTATION = f"{DOMAIN}/gateway-config-hash"
# SIGTERM makes nginx drop open streams; the preStop hook first lets the endpoint removal reach
# every proxy, then asks for a graceful stop (open requests finish) and waits for it.
PRE_STOP = ("sleep 5; nginx -e stderr -c /etc/llm-gateway/nginx.conf -s quit; "
            "while [ -e /tmp/nginx.pid ]; do sleep 1; done")
GRACE_SECONDS = 60


@dataclass(frozen=True)
class GatewayNames:
    gateway: str
    config: str
    policy: str
    # router.gateway.tls: the Secret nginx serves (None without TLS), the Certificate writing it
    # (named as the gateway: its kind tells them apart) and the self-signed Issuer's name.
    tls_secret: Optional[str] = None
    certificate: str = ""
    issuer: str = ""

    @classmethod
    def of(cls, stack: StackConfig) -> GatewayNames:
        gateway = stack.router.gateway
        name = gateway.resolved_name(stack.router.name)
        return cls(gateway=name, config=f"{name}-config", policy=f"{name}-ingress",
                   tls_secret=gateway.tls_secret(stack.router.name), certificate=name, issuer=f"{name}-selfsigned")


@dataclass(frozen=True)
class GatewayManifests:
    names: GatewayNames
    config_map: dict
    deployment: dict
    service: dict
    pod_disruption_budget: Optional[dict] = None
    network_policy: Optional[dict] = None
    # With tenant limits: the limiter the replicas ask (its Service before the gateway's pods,
    # which resolve its name at start).
    limiter: Optional[LimiterManifests] = None
    # With platform.metrics: the health port's Service and its ServiceMonitor.
    metrics_service: Optional[dict] = None
    service_monitor: Optional[dict] = None
    # With router.gateway.tls (no existingSecret): the Certificate whose Secret the pods mount,
    # and the self-signed Issuer when no issuer is named.
    issuer: Optional[dict] = None
    certificate: Optional[dict] = None


def enabled(stack: StackConfig) -> bool:
    return stack.router is not None and stack.router.gateway.enabled


def settings(stack: StackConfig) -> GatewaySettings:
    router = stack.router
    fronted = fronted_models(router, [m.name for m in stack.models])
    upstream = f"{in_cluster(router.name, stack.platform.namespace)}:{ROUTER_HTTP_PORT}"
    adapters = {m.name: tuple(a.name for a in m.lora.adapters) for m in stack.models}
    sleepers = tuple(m.name for m in stack.models if may_sleep(m))
    # models[].next: the share of new conversations the next revision (router id <model>-next) gets.
    splits = tuple((m.name, next_name(m), m.next.weight) for m in stack.models if m.next is not None)
    return GatewaySettings.of(router.gateway, upstream, admitted_models(router.gateway, fronted),
                              limiter_address(stack, GatewayNames.of(stack).gateway), adapters, sleepers, splits)


def endpoint_url(stack: StackConfig) -> str:
    """The URL clients call (OpenAI base URL: this plus ``/v1``); ``https://`` with TLS, the
    name on the certificate."""
    scheme = "https" if stack.router.gateway.tls.enabled else "http"
    return f"{scheme}://{in_cluster(GatewayNames.of(stack).gateway, stack.platform.namespace)}:{SERVICE_PORT}"


def port_name(stack: StackConfig) -> str:
    """The client port's name on the container and the Service: what it speaks."""
    return "https" if stack.router.gateway.tls.enabled else "http"


def _metadata(stack: StackConfig, name: str, component: str = GATEWAY_COMPONENT) -> dict:
    return {"name": name, "namespace": stack.platform.namespace, "labels": labels(stack.router, component)}


def compile_config_map(stack: StackConfig, names: GatewayNames, files: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(stack, names.config),
            "data": dict(sorted(files.items()))}


def config_hash(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def _security_context(uid: int) -> dict:
    ident = common.Identity(uid, uid)
    return common.container_security_context(ident, read_only_root=True)


def compile_deployment(stack: StackConfig, names: GatewayNames, files: dict[str, str]) -> dict:
    router, gateway, platform = stack.router, stack.router.gateway, stack.platform
    selector = selector_labels(router, GATEWAY_COMPONENT)
    volumes = [
        {"name": "config", "configMap": {"name": names.config}},
        # Request bodies spool here: the in-flight budgets bound them below this (config.gateway).
        {"name": "tmp", "emptyDir": {"sizeLimit": f"{SCRATCH_BYTES // (1024 * 1024)}Mi"}},
    ]
    mounts = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if gateway.api_keys is not None:
        keys = gateway.api_keys
        volumes.append({"name": "api-keys", "secret": {
            "secretName": keys.secret_name, "defaultMode": 0o444,
            "items": [{"key": keys.secret_key, "path": keys.secret_key}]}})
        mounts.append({"name": "api-keys", "mountPath": KEYS_DIR, "readOnly": True})
    if names.tls_secret is not None:
        # Group-readable only (fsGroup below): the key is nginx's alone. A volume, not a subPath
        # mount, so a renewal reaches the files (nginx reads them at each handshake).
        volumes.append({"name": "tls", "secret": {
            "secretName": names.tls_secret, "defaultMode": 0o440,
            "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}})
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    # Probes stay on the plain health port: the kubelet's HTTPS probes verify nothing, and
    # Prometheus scrapes that port too.
    probe = {"httpGet": {"path": HEALTH_PATH, "port": "health"}}
    amounts = gateway.resources
    container = {
        "name": CONTAINER,
        "image": gateway.image,
        # Not the image's entrypoint script: it edits files under /etc/nginx (read-only here).
        # Ours writes the pod's DNS servers for nginx's resolver first (resolver.py).
        "command": start_command(SCRATCH_DIR, ["nginx", "-e", "stderr", "-c", f"{CONFIG_DIR}/nginx.conf"]),
        "ports": [{"name": port_name(stack), "containerPort": HTTP_PORT, "protocol": "TCP"},
                  {"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": amounts.requests.cpu, "memory": amounts.requests.memory},
                      "limits": {"cpu": amounts.limits.cpu, "memory": amounts.limits.memory}},
        "readinessProbe": {**probe, "periodSeconds": 5},
        "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", PRE_STOP]}}},
        "volumeMounts": mounts,
        "securityContext": _security_context(gateway.uid),
    }
    pod_context = common.pod_security_context(common.Identity(gateway.uid, gateway.uid), fs_group=False)
    if names.tls_secret is not None:
        pod_context["fsGroup"] = gateway.uid  # the TLS Secret's files: root-owned, this group, 0440
    spec: dict = {
        "automountServiceAccountToken": False,
        **common.POD_DEFAULTS,
        "securityContext": pod_context,
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "containers": [container],
        "volumes": volumes,
        **spread(selector, gateway.replicas),
        **common.placement(gateway.node_selector, gateway.tolerations),
    }
    pull_secrets = common.image_pull_secrets(platform)
    if pull_secrets:
        spec["imagePullSecrets"] = pull_secrets
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(stack, names.gateway),
        "spec": {
            "replicas": gateway.replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels(router, GATEWAY_COMPONENT),
                             # A changed file rolls the pods (nginx reads its files at start).
                             "annotations": {CONFIG_HASH_ANNOTATION: config_hash(files)}},
                "spec": spec,
            },
        },
    }


def compile_service(stack: StackConfig, names: GatewayNames) -> dict:
    gateway = stack.router.gateway
    metadata = _metadata(stack, names.gateway)
    if gateway.service_annotations:
        metadata["annotations"] = dict(sorted(gateway.service_annotations.items()))
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata,
            "spec": {"type": gateway.service_type, "selector": selector_labels(stack.router, GATEWAY_COMPONENT),
                     "ports": [{"name": port_name(stack), "port": SERVICE_PORT, "targetPort": port_name(stack),
                                "protocol": "TCP", **({"appProtocol": "https"} if gateway.tls.enabled else {})}]}}


def compile_self_signed_issuer(stack: StackConfig, names: GatewayNames) -> dict:
    return {"apiVersion": f"{CERT_MANAGER_GROUP}/v1", "kind": "Issuer", "metadata": _metadata(stack, names.issuer),
            "spec": {"selfSigned": {}}}


def compile_certificate(stack: StackConfig, names: GatewayNames) -> dict:
    """The client port's certificate: the Service's in-cluster names (what in-cluster clients
    verify) and ``tls.dnsNames``, from the named issuer or the gateway's self-signed one."""
    router, gateway = stack.router, stack.router.gateway
    issuer = gateway.tls.issuer
    issuer_ref = {"name": issuer.name, "kind": issuer.kind} if issuer else {"name": names.issuer, "kind": "Issuer"}
    return {
        "apiVersion": f"{CERT_MANAGER_GROUP}/v1", "kind": "Certificate", "metadata": _metadata(stack, names.certificate),
        "spec": {
            "secretName": names.tls_secret,
            "issuerRef": {**issuer_ref, "group": CERT_MANAGER_GROUP},
            "dnsNames": list(gateway.tls_dns_names(router.name, stack.platform.namespace)),
            "duration": CERT_DURATION,
            "renewBefore": CERT_RENEW_BEFORE,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["digital signature", "server auth"],
        },
    }


CERT_MANAGER_FIX = ("install cert-manager with its CRDs (helm install cert-manager jetstack/cert-manager "
                    "-n cert-manager --create-namespace --set crds.enabled=true), set "
                    "router.gateway.tls.existingSecret, or set router.gateway.tls.enabled: false")


def required_crds(manifests: Optional[GatewayManifests]) -> list[dict]:
    """cert-manager's and the Prometheus Operator's CRDs the gateway's objects need, with the fix
    (providers.crd_check, at preview)."""
    if manifests is None:
        return []
    requirements = []
    if manifests.certificate is not None:
        kinds = [m["kind"] for m in (manifests.issuer, manifests.certificate) if m is not None]
        referenced = manifests.certificate["spec"]["issuerRef"]["kind"]
        kinds += [] if referenced in kinds else [referenced]
        requirements.append({"field": "router.gateway.tls",
                             "crds": [f"{kind.lower()}s.{CERT_MANAGER_GROUP}" for kind in kinds],
                             "version": "v1", "fix": CERT_MANAGER_FIX})
    return requirements + monitoring_required_crds(manifests.service_monitor)


def compile_pdb(stack: StackConfig, names: GatewayNames) -> Optional[dict]:
    if stack.router.gateway.replicas < 2:
        return None
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _metadata(stack, names.gateway),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(stack.router, GATEWAY_COMPONENT)}}}


def gateway_pods(stack: StackConfig) -> dict:
    """The peer the router's NetworkPolicy admits on its HTTP port."""
    return {"podSelector": {"matchLabels": selector_labels(stack.router, GATEWAY_COMPONENT)}}


def compile_network_policy(stack: StackConfig, names: GatewayNames, has_limiter: bool = False) -> Optional[dict]:
    """Ingress: the API port from anywhere (it is the front door, with its own authentication);
    the health port from ``allowFrom``. Egress: the router pods' HTTP port, the limiter's (with
    tenant limits), and DNS (nginx resolves the router's name per request through the pod's
    nameservers, the limiter's at start)."""
    if not stack.platform.network_policy.enabled:
        return None
    router = stack.router
    ingress: list[dict] = [{"ports": [{"protocol": "TCP", "port": HTTP_PORT}]}]
    monitors = allowed_peers(stack)
    if monitors:
        ingress.append({"from": monitors, "ports": [{"protocol": "TCP", "port": HEALTH_PORT}]})
    egress = [
        {"to": [{"podSelector": {"matchLabels": selector_labels(router, ROUTER_COMPONENT)}}],
         "ports": [{"protocol": "TCP", "port": ROUTER_HTTP_PORT}]},
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
    ]
    if has_limiter:
        egress.insert(1, {"to": [limiter_pods(stack)], "ports": [{"protocol": "TCP", "port": LIMITER_PORT}]})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _metadata(stack, names.policy, POLICY_COMPONENT),
            "spec": {"podSelector": {"matchLabels": selector_labels(router, GATEWAY_COMPONENT)},
                     "policyTypes": ["Ingress", "Egress"], "ingress": ingress, "egress": egress}}


def compile_gateway(stack: StackConfig) -> Optional[GatewayManifests]:
    """The gateway's objects, or None when the stack has no router or the gateway is off."""
    if not enabled(stack):
        return None
    names = GatewayNames.of(stack)
    tls = stack.router.gateway.tls
    resolved = settings(stack)
    files = render_files(resolved)
    limiter = None
    if resolved.limiter:
        own = {name: files[name] for name in (LIMITER_CONF, LIMITER_SCRIPT, LIMITER_SETTINGS)}
        limiter = compile_limiter(stack, names.gateway, names.config, config_hash(own), CONFIG_HASH_ANNOTATION)
    return GatewayManifests(
        names=names,
        config_map=compile_config_map(stack, names, files),
        deployment=compile_deployment(stack, names, files),
        service=compile_service(stack, names),
        pod_disruption_budget=compile_pdb(stack, names),
        network_policy=compile_network_policy(stack, names, limiter is not None),
        limiter=limiter,
        metrics_service=compile_metrics_service(stack, names.gateway),
        service_monitor=compile_service_monitor(stack, names.gateway),
        issuer=compile_self_signed_issuer(stack, names) if tls.issued and tls.issuer is None else None,
        certificate=compile_certificate(stack, names) if tls.issued else None,
    )
