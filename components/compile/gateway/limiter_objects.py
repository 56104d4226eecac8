"""The limiter's objects (rendered when a tenant has ``rateLimit``): Deployment, Service and,
with ``platform.networkPolicy``, a NetworkPolicy admitting only the gateway pods.

One replica, ``Recreate``: two limiters would each count part of a tenant's requests (see
``limiter.py`` for why it exists and what happens while it is down). It runs the gateway's image
and mounts the gateway's ConfigMap, starting nginx on ``limiter.conf``; the same pod hardening
as the gateway (non-root, read-only root, no capabilities, no service-account token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...config.stack import StackConfig
from .. import common
from ..router.names import POLICY_COMPONENT, in_cluster, labels, selector_labels
from ..router.network import GATEWAY_COMPONENT
from .limiter import LIMITER_CONF, LIMITER_HEALTH_PATH, LIMITER_PORT
from .nginx import CONFIG_DIR

LIMITER_COMPONENT = "gateway-limiter"
CONTAINER = "limiter"
# Its buckets are a few numbers per tenant; nginx with one worker needs little more.
RESOURCES = {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}


@dataclass(frozen=True)
class LimiterManifests:
    deployment: dict
    service: dict
    network_policy: Optional[dict] = None


def limiter_name(gateway_name: str) -> str:
    return f"{gateway_name}-limiter"  # GatewayConfig.object_names, which the config checks for collisions


def limiter_address(stack: StackConfig, gateway_name: str) -> str:
    return f"{in_cluster(limiter_name(gateway_name), stack.platform.namespace)}:{LIMITER_PORT}"


def limiter_pods(stack: StackConfig) -> dict:
    return {"podSelector": {"matchLabels": selector_labels(stack.router, LIMITER_COMPONENT)}}


def _metadata(stack: StackConfig, name: str, component: str) -> dict:
    return {"name": name, "namespace": stack.platform.namespace, "labels": labels(stack.router, component)}


def compile_limiter(stack: StackConfig, gateway_name: str, config_name: str, config_hash: str,
                    hash_annotation: str) -> LimiterManifests:
    router, gateway, platform = stack.router, stack.router.gateway, stack.platform
    name = limiter_name(gateway_name)
    selector = selector_labels(router, LIMITER_COMPONENT)
    ident = common.Identity(gateway.uid, gateway.uid)
    probe = {"httpGet": {"path": LIMITER_HEALTH_PATH, "port": "limiter"}}
    container = {
        "name": CONTAINER,
        "image": gateway.image,
        "command": ["nginx", "-e", "stderr", "-c", f"{CONFIG_DIR}/{LIMITER_CONF}"],
        "ports": [{"name": "limiter", "containerPort": LIMITER_PORT, "protocol": "TCP"}],
        "resources": RESOURCES,
        "readinessProbe": {**probe, "periodSeconds": 5},
        "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": common.container_security_context(ident, read_only_root=True),
    }
    spec: dict = {
        "automountServiceAccountToken": False,
        **common.POD_DEFAULTS,
        "securityContext": common.pod_security_context(ident, fs_group=False),
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": config_name}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
        # The gateway's placement: it is the gateway's own part (its image, its ConfigMap).
        **common.placement(gateway.node_selector, gateway.tolerations),
    }
    pull_secrets = common.image_pull_secrets(platform)
    if pull_secrets:
        spec["imagePullSecrets"] = pull_secrets
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(stack, name, LIMITER_COMPONENT),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": labels(router, LIMITER_COMPONENT),
                                      "annotations": {hash_annotation: config_hash}},
                         "spec": spec},
        },
    }
    service = {"apiVersion": "v1", "kind": "Service", "metadata": _metadata(stack, name, LIMITER_COMPONENT),
               "spec": {"type": "ClusterIP", "selector": selector,
                        "ports": [{"name": "limiter", "port": LIMITER_PORT, "targetPort": "limiter",
                                   "protocol": "TCP"}]}}
    policy = None
    if platform.network_policy.enabled:
        # Only the gateway pods may ask it; it calls nothing (no egress at all).
        policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                  "metadata": _metadata(stack, f"{name}-ingress", POLICY_COMPONENT),
                  "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress", "Egress"],
                           "ingress": [{"from": [{"podSelector": {"matchLabels": selector_labels(router, GATEWAY_COMPONENT)}}],
                                        "ports": [{"protocol": "TCP", "port": LIMITER_PORT}]}],
                           "egress": []}}
    return LimiterManifests(deployment=deployment, service=service, network_policy=policy)
