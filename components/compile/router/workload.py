"""The router itself: its pods, workload, Services, PodDisruptionBudget, ServiceAccount and Role.

Rollout fields differ per kind and each kind gets only its own (chart 0.16.2
``templates/deployment.yaml``):
- Deployment: ``strategy`` (surge one new pod before an old one goes: maxSurge 1,
  maxUnavailable 0), so a changed flag or port rolls without a gap;
- StatefulSet: ``serviceName`` (always the headless Service), ``podManagementPolicy`` and
  ``updateStrategy``; ``serviceName`` and ``podManagementPolicy`` are immutable on a live
  StatefulSet, and neither ever changes here.

The headless Service is always rendered (chart 0.16.2 check-multi-replica-render.sh asserts it
for a Deployment too): the backend router watches its EndpointSlices, and Stargate's DNS
discovery resolves it. It publishes not-ready addresses so a warming pod can already take
registrations, and names its ports exactly ``grpc`` (TCP) and ``quic`` (UDP), the names the
backend router looks up.
"""

from __future__ import annotations

from ...config.router_names import Topology
from ...config.stack import StackConfig
from .. import common
from ..pylon import router_worker_auth
from .flags import router_args
from .lb import lb_pod_parts
from .names import (
    GRPC_PORT,
    HTTP_PORT,
    LIVE_PATH,
    METRICS_PORT,
    QUIC_PORT,
    READY_PATH,
    ROUTER_COMPONENT,
    RouterNames,
    container_security_context,
    field_env,
    grace_seconds,
    labels,
    metadata,
    pod_security_context,
    resources,
    selector_labels,
    tls_volume,
)


def spread(labels_: dict, replicas: int) -> dict:
    """Prefer one pod per node, so a node loss takes at most one replica (soft: never blocks)."""
    if replicas < 2:
        return {}
    return {"topologySpreadConstraints": [{
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": labels_},
    }]}


def router_env(stack: StackConfig) -> list[dict]:
    # The chart's only env: the downward API values the flags reference as $(POD_NAME) etc.
    env = [
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_IP", "status.podIP"),
    ]
    env.extend({"name": key, "value": value} for key, value in sorted(stack.router.env.items()))
    return env


def router_ports() -> list[dict]:
    return [
        {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
        {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
        {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        {"name": "reverse", "containerPort": QUIC_PORT, "protocol": "UDP"},
    ]


def router_pod_template(stack: StackConfig, names: RouterNames, topology: Topology) -> dict:
    router, platform = stack.router, stack.platform
    mounts = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes = [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    if router.tls.enabled:
        volume, mount = tls_volume(names)
        volumes.append(volume)
        mounts.append(mount)
    # workerAuth.mode token: the worker-auth file router_args points --worker-auth-file at.
    auth = router_worker_auth(router)
    volumes += auth.volumes
    mounts += auth.mounts
    lb_volumes, lb_mounts, annotations = lb_pod_parts(router)
    volumes += lb_volumes
    mounts += lb_mounts
    container = {
        "name": "router",
        "image": router.image,
        "args": router_args(stack, names, topology),
        "env": router_env(stack),
        "ports": router_ports(),
        "resources": resources(router.resources),
        "readinessProbe": {"httpGet": {"path": READY_PATH, "port": "http"}, "periodSeconds": 2},
        "livenessProbe": {"httpGet": {"path": LIVE_PATH, "port": "http"}, "periodSeconds": 5},
        "volumeMounts": mounts,
        "securityContext": container_security_context(router),
    }
    spec: dict = {
        "serviceAccountName": names.service_account,
        # The chart's Role lets the router list and watch pods of its namespace.
        "automountServiceAccountToken": True,
        # A Service named like an env prefix would otherwise inject variables into the pod.
        "enableServiceLinks": False,
        "securityContext": pod_security_context(router),
        "terminationGracePeriodSeconds": grace_seconds(router),
        "containers": [container],
        "volumes": volumes,
        **spread(selector_labels(router, ROUTER_COMPONENT), router.replicas),
        **common.placement(router.node_selector, router.tolerations),
    }
    pull_secrets = common.image_pull_secrets(platform)
    if pull_secrets:
        spec["imagePullSecrets"] = pull_secrets
    meta: dict = {"labels": labels(router, ROUTER_COMPONENT)}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


def compile_router_workload(stack: StackConfig, names: RouterNames, topology: Topology) -> dict:
    router = stack.router
    spec: dict = {
        "replicas": router.replicas,
        "selector": {"matchLabels": selector_labels(router, ROUTER_COMPONENT)},
    }
    if topology.kind == "StatefulSet":
        spec["serviceName"] = names.headless
        spec["podManagementPolicy"] = router.workload.pod_management_policy
        spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    else:
        spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    spec["template"] = router_pod_template(stack, names, topology)
    return {
        "apiVersion": "apps/v1",
        "kind": topology.kind,
        "metadata": metadata(names.router, stack.platform.namespace, router, ROUTER_COMPONENT),
        "spec": spec,
    }


def _port(name: str, port: int, target: str, protocol: str = "TCP") -> dict:
    return {"name": name, "port": port, "targetPort": target, "protocol": protocol}


def compile_router_service(stack: StackConfig, names: RouterNames) -> dict:
    """Clients' Service: honours readiness. http for requests; grpc and quic for pylons when no
    backend router fronts the pods (the single-replica advertised name is this Service's);
    metrics for the ServiceMonitor."""
    router = stack.router
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": metadata(names.router, stack.platform.namespace, router, ROUTER_COMPONENT),
            "spec": {
                "type": "ClusterIP",
                "selector": selector_labels(router, ROUTER_COMPONENT),
                "ports": [
                    _port("http", HTTP_PORT, "http"),
                    _port("grpc", GRPC_PORT, "grpc"),
                    _port("quic", QUIC_PORT, "reverse", "UDP"),
                    _port("metrics", METRICS_PORT, "metrics"),
                ],
            }}


def compile_headless_service(stack: StackConfig, names: RouterNames) -> dict:
    router = stack.router
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": metadata(names.headless, stack.platform.namespace, router, ROUTER_COMPONENT),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": selector_labels(router, ROUTER_COMPONENT),
                "ports": [_port("grpc", GRPC_PORT, "grpc"), _port("quic", QUIC_PORT, "reverse", "UDP")],
            }}


def compile_pdb(stack: StackConfig, name: str, component: str, budget: dict) -> dict:
    router = stack.router
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(name, stack.platform.namespace, router, component),
        "spec": {**budget, "selector": {"matchLabels": selector_labels(router, component)}},
    }


def compile_service_account(stack: StackConfig, name: str, component: str) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": metadata(name, stack.platform.namespace, stack.router, component),
            # Each pod that needs the token says so in its own spec.
            "automountServiceAccountToken": False}


def compile_role(stack: StackConfig, role: str, account: str, component: str, rule: dict) -> tuple[dict, dict]:
    """A namespaced Role with one rule and its RoleBinding to ``account``."""
    router, namespace = stack.router, stack.platform.namespace
    role_obj = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": metadata(role, namespace, router, component),
                "rules": [{key: list(value) for key, value in rule.items()}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": metadata(role, namespace, router, component),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}
    return role_obj, binding


# chart 0.16.2 templates/rbac.yaml: the router's Role <fullname>-pod-reader.
POD_READER_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}
