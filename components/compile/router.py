"""The request router and its backend router: workload, Services, RBAC, PDBs, monitoring, TLS.

Pure: typed config in, wire-shape dicts out. The topology (which discovery, which objects) is
resolved by the config model (``RouterConfig.topology``); this module only renders it.

Rollout fields differ per kind and each kind gets only its own:
- Deployment: ``strategy`` (surge one new pod before an old one goes: routers are stateless);
- StatefulSet: ``serviceName``, ``podManagementPolicy`` and ``updateStrategy``. ``serviceName``
  and ``podManagementPolicy`` are immutable on a live StatefulSet, so ``serviceName`` always names
  the headless Service, whether or not that Service is created (``dnsDiscovery``): switching DNS
  discovery creates or deletes a Service and never replaces the StatefulSet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from ..config.model import ModelConfig, StackConfig
from ..config.router import RouterConfig, Topology, dns_names, fronted_models
from . import common, nim, server

ROUTER_COMPONENT = "router"
BACKEND_COMPONENT = "backend-router"
TLS_MOUNT = "/etc/llm-router/tls"
CERT_MANAGER_GROUP = "cert-manager.io"
CERT_DURATION = "2160h"  # 90 days
CERT_RENEW_BEFORE = "360h"  # 15 days
ENDPOINTSLICE_RULE = {
    "apiGroups": ["discovery.k8s.io"],
    "resources": ["endpointslices"],
    "verbs": ["get", "list", "watch"],
}


@dataclass(frozen=True)
class RouterNames:
    router: str
    headless: str
    backend: str
    backend_service_account: str
    backend_role: str
    issuer: str
    certificate: str
    tls_secret: str

    @classmethod
    def of(cls, router: RouterConfig, namespace: str) -> "RouterNames":
        backend = f"{router.name}-backend"
        # A ClusterRole is cluster-wide: prefix the namespace so two stacks never share one.
        role = f"{backend}-endpointslices"
        if router.backend_router.rbac_scope == "cluster":
            role = f"{namespace}-{role}"
        return cls(
            router=router.name,
            headless=f"{router.name}-headless",
            backend=backend,
            backend_service_account=backend,
            backend_role=role,
            issuer=f"{router.name}-selfsigned",
            certificate=router.name,
            tls_secret=router.tls.secret_name or f"{router.name}-tls",
        )


@dataclass(frozen=True)
class RouterManifests:
    """The router's objects; ``None`` where the topology or config does not call for one."""

    topology: Topology
    names: RouterNames
    workload: dict
    service: dict
    headless_service: Optional[dict] = None
    pod_disruption_budget: Optional[dict] = None
    backend_service_account: Optional[dict] = None
    backend_role: Optional[dict] = None
    backend_role_binding: Optional[dict] = None
    backend_deployment: Optional[dict] = None
    backend_service: Optional[dict] = None
    backend_pod_disruption_budget: Optional[dict] = None
    service_monitor: Optional[dict] = None
    issuer: Optional[dict] = None
    certificate: Optional[dict] = None

    ORDER = (
        "backend_service_account", "backend_role", "backend_role_binding", "backend_deployment",
        "backend_service", "backend_pod_disruption_budget", "service_monitor", "issuer",
        "certificate", "headless_service", "workload", "service", "pod_disruption_budget",
    )

    def in_order(self) -> list[dict]:
        """Backend router first (the router connects to it), TLS before the pods mount it."""
        return [m for m in (getattr(self, key) for key in self.ORDER) if m is not None]


def selector_labels(router: RouterConfig, component: str) -> dict[str, str]:
    """Never-changing selector subset: the router name and its component."""
    return {"app.kubernetes.io/name": router.name, "app.kubernetes.io/component": component}


def labels(router: RouterConfig, component: str) -> dict[str, str]:
    return {
        **selector_labels(router, component),
        "app.kubernetes.io/instance": router.name,
        "app.kubernetes.io/part-of": common.PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def metadata(name: str, namespace: Optional[str], router: RouterConfig, component: str) -> dict:
    """``namespace=None`` for cluster-scoped objects (ClusterRole, ClusterRoleBinding)."""
    scope = {} if namespace is None else {"namespace": namespace}
    return {"name": name, **scope, "labels": labels(router, component)}


def identity(router: RouterConfig) -> common.Identity:
    return common.Identity(router.uid, router.gid)


def container_security_context(router: RouterConfig) -> dict:
    # Neither binary writes outside /tmp (an emptyDir), so the root filesystem is read-only.
    return {**common.container_security_context(identity(router)), "readOnlyRootFilesystem": True}


def spread(router: RouterConfig, component: str, replicas: int) -> dict:
    """Prefer one pod per node, so a node loss takes at most one replica (soft: never blocks)."""
    if replicas < 2:
        return {}
    return {"topologySpreadConstraints": [{
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": selector_labels(router, component)},
    }]}


def _field_env(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _in_cluster(service: str, namespace: str) -> str:
    return f"{service}.{namespace}.svc.cluster.local"


def _fronted(stack: StackConfig) -> list[ModelConfig]:
    by_name = {m.name: m for m in stack.models}
    return [by_name[name] for name in fronted_models(stack.router, by_name)]


def model_backends(stack: StackConfig) -> dict[str, str]:
    """Model name → in-cluster endpoint URL of every model the router fronts."""
    return {
        model.name: (nim.endpoint_url if model.on_operator else server.endpoint_url)(model, stack.platform)
        for model in _fronted(stack)
    }


def fronted_services(stack: StackConfig) -> dict[str, str]:
    """Model name → the Service whose EndpointSlices hold its pods, for every fronted model (the
    operator names its Service after the NIMService, as the raw path does after the model)."""
    return {m.name: nim.names(m, stack).service if m.on_operator else common.ModelNames.of(m).service
            for m in _fronted(stack)}


def model_services(stack: StackConfig) -> list[str]:
    return list(fronted_services(stack).values())


def port_name(router: RouterConfig) -> str:
    return "https" if router.tls.enabled else "http"


def endpoint_url(stack: StackConfig) -> str:
    router = stack.router
    return f"{port_name(router)}://{_in_cluster(router.name, stack.platform.namespace)}:{router.port}"


def router_env(stack: StackConfig, names: RouterNames, topology: Topology) -> list[dict]:
    router, namespace = stack.router, stack.platform.namespace
    env = [
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        {"name": "ROUTER_PORT", "value": str(router.port)},
        {"name": "ROUTER_DISCOVERY", "value": ",".join(topology.discovery)},
        {"name": "ROUTER_MODELS", "value": json.dumps(model_backends(stack), sort_keys=True, separators=(",", ":"))},
    ]
    if topology.backend_router:
        env.append({"name": "ROUTER_BACKEND_ROUTER",
                    "value": f"{_in_cluster(names.backend, namespace)}:{router.backend_router.port}"})
    if topology.headless_service:
        env.append({"name": "ROUTER_PEER_DNS", "value": _in_cluster(names.headless, namespace)})
    if router.tls.enabled:
        env.append({"name": "ROUTER_TLS_CERT_FILE", "value": f"{TLS_MOUNT}/tls.crt"})
        env.append({"name": "ROUTER_TLS_KEY_FILE", "value": f"{TLS_MOUNT}/tls.key"})
    env.extend({"name": key, "value": value} for key, value in sorted(router.env.items()))
    return env


def router_pod_template(stack: StackConfig, names: RouterNames, topology: Topology) -> dict:
    router, platform = stack.router, stack.platform
    def probe() -> dict:
        return {"httpGet": {"path": router.health_path, "port": port_name(router),
                            "scheme": "HTTPS" if router.tls.enabled else "HTTP"}}

    mounts = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes = [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    if router.tls.enabled:
        mounts.append({"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True})
        # 0440 + fsGroup: the key is readable by the router's group only.
        volumes.append({"name": "tls", "secret": {"secretName": names.tls_secret, "defaultMode": 0o440}})
    container = {
        "name": "router",
        "image": router.image,
        "env": router_env(stack, names, topology),
        "ports": [{"name": port_name(router), "containerPort": router.port, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": router.resources.cpu, "memory": router.resources.memory},
            "limits": {"memory": router.resources.memory},
        },
        "readinessProbe": {**probe(), "periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 3},
        "livenessProbe": {**probe(), "periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 3},
        "volumeMounts": mounts,
        "securityContext": container_security_context(router),
    }
    if router.args:
        container["args"] = list(router.args)
    spec: dict = {
        # The models' ServiceAccount: bound to no Role. The router needs no API access at all.
        "serviceAccountName": platform.service_account_name,
        "automountServiceAccountToken": False,
        "securityContext": common.pod_security_context(identity(router), fs_group=router.tls.enabled),
        "containers": [container],
        "volumes": volumes,
        **spread(router, ROUTER_COMPONENT, router.replicas),
    }
    pull_secrets = common.image_pull_secrets(platform)
    if pull_secrets:
        spec["imagePullSecrets"] = pull_secrets
    return {"metadata": {"labels": labels(router, ROUTER_COMPONENT)}, "spec": spec}


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


def compile_router_service(stack: StackConfig, names: RouterNames, headless: bool = False) -> dict:
    router = stack.router
    spec: dict = {
        "type": "ClusterIP",
        "selector": selector_labels(router, ROUTER_COMPONENT),
        "ports": [{"name": port_name(router), "port": router.port, "targetPort": port_name(router), "protocol": "TCP"}],
    }
    if headless:
        # Per-pod DNS for peers: published before a pod is ready, so peers can find a starting one.
        spec = {**spec, "clusterIP": "None", "publishNotReadyAddresses": True}
    name = names.headless if headless else names.router
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": metadata(name, stack.platform.namespace, router, ROUTER_COMPONENT), "spec": spec}


def compile_pdb(router: RouterConfig, name: str, namespace: str, component: str, budget: dict) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(name, namespace, router, component),
        "spec": {**budget, "selector": {"matchLabels": selector_labels(router, component)}},
    }


# --- backend router ---------------------------------------------------------------------------

def compile_backend_service_account(router: RouterConfig, names: RouterNames, namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(names.backend_service_account, namespace, router, BACKEND_COMPONENT),
        # Only the backend-router pod mounts the token, and says so in its own spec.
        "automountServiceAccountToken": False,
    }


def compile_backend_rbac(router: RouterConfig, names: RouterNames, namespace: str) -> tuple[dict, dict]:
    """get/list/watch on EndpointSlices and nothing else; namespace-scoped unless configured."""
    cluster = router.backend_router.rbac_scope == "cluster"
    role_kind = "ClusterRole" if cluster else "Role"
    scope = None if cluster else namespace
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": role_kind,
        "metadata": metadata(names.backend_role, scope, router, BACKEND_COMPONENT),
        "rules": [{key: list(value) for key, value in ENDPOINTSLICE_RULE.items()}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{role_kind}Binding",
        "metadata": metadata(names.backend_role, scope, router, BACKEND_COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": names.backend_role},
        "subjects": [{"kind": "ServiceAccount", "name": names.backend_service_account, "namespace": namespace}],
    }
    return role, binding


def compile_backend_deployment(stack: StackConfig, names: RouterNames) -> dict:
    router, platform = stack.router, stack.platform
    backend = router.backend_router
    services = model_services(stack)
    container = {
        "name": "backend-router",
        "image": backend.image,
        "env": [
            _field_env("POD_NAME", "metadata.name"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
            {"name": "BACKEND_ROUTER_PORT", "value": str(backend.port)},
            {"name": "BACKEND_ROUTER_METRICS_PORT", "value": str(backend.metrics_port)},
            {"name": "BACKEND_ROUTER_WATCH_NAMESPACE", "value": platform.namespace},
            # The Services whose EndpointSlices are the targets (kubernetes.io/service-name).
            {"name": "BACKEND_ROUTER_WATCH_SERVICES", "value": ",".join(services)},
        ],
        "ports": [
            {"name": "grpc", "containerPort": backend.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": backend.metrics_port, "protocol": "TCP"},
        ],
        "resources": {
            "requests": {"cpu": backend.resources.cpu, "memory": backend.resources.memory},
            "limits": {"memory": backend.resources.memory},
        },
        "readinessProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 15, "failureThreshold": 3},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": container_security_context(router),
    }
    pod_spec: dict = {
        "serviceAccountName": names.backend_service_account,
        # The one pod here that talks to the API server: it watches EndpointSlices.
        "automountServiceAccountToken": True,
        "securityContext": common.pod_security_context(identity(router), fs_group=False),
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
        **spread(router, BACKEND_COMPONENT, backend.replicas),
    }
    pull_secrets = common.image_pull_secrets(platform)
    if pull_secrets:
        pod_spec["imagePullSecrets"] = pull_secrets
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(names.backend, platform.namespace, router, BACKEND_COMPONENT),
        "spec": {
            "replicas": backend.replicas,
            "selector": {"matchLabels": selector_labels(router, BACKEND_COMPONENT)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": labels(router, BACKEND_COMPONENT)}, "spec": pod_spec},
        },
    }


def compile_backend_service(router: RouterConfig, names: RouterNames, namespace: str) -> dict:
    backend = router.backend_router
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(names.backend, namespace, router, BACKEND_COMPONENT),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(router, BACKEND_COMPONENT),
            "ports": [
                {"name": "grpc", "port": backend.port, "targetPort": "grpc", "protocol": "TCP"},
                {"name": "metrics", "port": backend.metrics_port, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def compile_service_monitor(router: RouterConfig, names: RouterNames, namespace: str) -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(names.backend, namespace, router, BACKEND_COMPONENT),
        "spec": {
            "selector": {"matchLabels": selector_labels(router, BACKEND_COMPONENT)},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}],
        },
    }


# --- TLS --------------------------------------------------------------------------------------

def compile_self_signed_issuer(router: RouterConfig, names: RouterNames, namespace: str) -> dict:
    return {
        "apiVersion": f"{CERT_MANAGER_GROUP}/v1",
        "kind": "Issuer",
        "metadata": metadata(names.issuer, namespace, router, ROUTER_COMPONENT),
        "spec": {"selfSigned": {}},
    }


def compile_certificate(router: RouterConfig, names: RouterNames, namespace: str) -> dict:
    issuer = router.tls.issuer
    issuer_ref = ({"name": issuer.name, "kind": issuer.kind} if issuer
                  else {"name": names.issuer, "kind": "Issuer"})
    return {
        "apiVersion": f"{CERT_MANAGER_GROUP}/v1",
        "kind": "Certificate",
        "metadata": metadata(names.certificate, namespace, router, ROUTER_COMPONENT),
        "spec": {
            "secretName": names.tls_secret,
            "issuerRef": {**issuer_ref, "group": CERT_MANAGER_GROUP},
            # Validated against tls.allowedDomains by the config model.
            "dnsNames": list(dns_names(router, namespace)),
            "duration": CERT_DURATION,
            "renewBefore": CERT_RENEW_BEFORE,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["digital signature", "server auth"],
        },
    }


def compile_router(stack: StackConfig) -> RouterManifests:
    router = stack.router
    if router is None:
        raise ValueError("the stack declares no router")
    namespace = stack.platform.namespace
    topology = router.topology
    names = RouterNames.of(router, namespace)
    parts: dict = {}
    if topology.headless_service:
        parts["headless_service"] = compile_router_service(stack, names, headless=True)
    if router.replicas > 1:
        parts["pod_disruption_budget"] = compile_pdb(
            router, names.router, namespace, ROUTER_COMPONENT, {"maxUnavailable": 1})
    if topology.backend_router:
        role, binding = compile_backend_rbac(router, names, namespace)
        parts.update(
            backend_service_account=compile_backend_service_account(router, names, namespace),
            backend_role=role,
            backend_role_binding=binding,
            backend_deployment=compile_backend_deployment(stack, names),
            backend_service=compile_backend_service(router, names, namespace),
            backend_pod_disruption_budget=compile_pdb(
                router, names.backend, namespace, BACKEND_COMPONENT,
                {"minAvailable": router.backend_router.pdb_min_available}),
        )
        if router.backend_router.service_monitor:
            parts["service_monitor"] = compile_service_monitor(router, names, namespace)
    if router.tls.enabled:
        if router.tls.issuer is None:
            parts["issuer"] = compile_self_signed_issuer(router, names, namespace)
        parts["certificate"] = compile_certificate(router, names, namespace)
    return RouterManifests(
        topology=topology,
        names=names,
        workload=compile_router_workload(stack, names, topology),
        service=compile_router_service(stack, names),
        **parts,
    )


# --- what the cluster must already serve ----------------------------------------------------

CERT_MANAGER_FIX = ("install cert-manager with its CRDs (helm install cert-manager jetstack/cert-manager "
                    "-n cert-manager --create-namespace --set crds.enabled=true), or set router.tls.enabled: false")
SERVICE_MONITOR_FIX = ("install the Prometheus Operator with its CRDs (e.g. the kube-prometheus-stack chart), "
                       "or set router.backendRouter.serviceMonitor: false")


def required_crds(manifests: RouterManifests) -> list[dict]:
    """The other operators' CRDs the router's objects need, per setting, with the fix: checked at
    preview (providers.crd_check) so a cluster without them stops the stack before anything is
    created, instead of an `up` failing half-way with "no matches for kind"."""
    requirements = []
    tls_objects = [m for m in (manifests.issuer, manifests.certificate) if m is not None]
    if tls_objects:
        kinds = [m["kind"] for m in tls_objects]
        issuer_ref = (manifests.certificate or {}).get("spec", {}).get("issuerRef", {})
        if issuer_ref.get("kind") and issuer_ref["kind"] not in kinds:
            kinds.append(issuer_ref["kind"])  # an existing Issuer / ClusterIssuer, by reference
        requirements.append({
            "field": "router.tls",
            "crds": [f"{kind.lower()}s.{CERT_MANAGER_GROUP}" for kind in dict.fromkeys(kinds)],
            "version": "v1",
            "fix": CERT_MANAGER_FIX,
        })
    if manifests.service_monitor is not None:
        requirements.append({
            "field": "router.backendRouter.serviceMonitor",
            "crds": ["servicemonitors.monitoring.coreos.com"],
            "version": "v1",
            "fix": SERVICE_MONITOR_FIX,
        })
    return requirements
