"""Names, labels, ports and the chart version the router render follows.

The render follows ONE chart version: NVIDIA's llm-request-router chart 0.16.2 (Stargate
0.16.2), as published in the public fork devilkun/nvcf@e07119fa60cd543fec61d30b52b6311162a53e89,
``deploy/helm/llm-request-router/llm-request-router/``. That version configures Stargate with CLI
flags; the newer 0.18.0 chart (NVIDIA/nvcf@3725b7a7) renders the same settings into a mounted
``stargate.toml`` instead. Flags are what 0.16.2 images read, and a config file given to them
would be rejected, so this module never mixes the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...config.router import RouterConfig
from ...config.router_names import backend_name, headless_name, tls_secret_name
from .. import common

CHART = "llm-request-router chart 0.16.2 (devilkun/nvcf@e07119fa)"

ROUTER_COMPONENT = "router"
BACKEND_COMPONENT = "backend-router"
POLICY_COMPONENT = "network-policy"

# chart 0.16.2 values.yaml llmRequestRouter.service: httpPort, grpcPort, metricsPort,
# reverseTunnelPort; transport.reverseTunnelListenAddr "0.0.0.0:50072" (UDP, QUIC).
HTTP_PORT = 8000
GRPC_PORT = 50071
METRICS_PORT = 9090
QUIC_PORT = 50072
# chart 0.16.2 values.yaml backendRouter.service: grpcPort, reverseTunnelPort, healthPort.
BACKEND_GRPC_PORT = 50071
BACKEND_QUIC_PORT = 50072
BACKEND_HEALTH_PORT = 8080

# chart 0.16.2 templates/deployment.yaml probes: readiness /readyz every 2 s, liveness /healthz
# every 5 s (Stargate's /readyz is 503 during its warmup); backend-router.yaml: /readyz and /livez
# on its health port.
READY_PATH = "/readyz"
LIVE_PATH = "/healthz"
BACKEND_LIVE_PATH = "/livez"

# chart 0.16.2 _helpers.tpl tlsMountPath default; the Secret's tls.crt/tls.key land there.
TLS_MOUNT = "/etc/stargate/tls"
TLS_CERT = f"{TLS_MOUNT}/tls.crt"
TLS_KEY = f"{TLS_MOUNT}/tls.key"
BACKEND_COMMAND = "/usr/local/bin/stargate-k8s-router"
# The backend router's copy of the Secret; TLS_MOUNT there is the serving chain assembled from it
# (backend.tls_chain_sidecar).
TLS_SECRET_MOUNT = "/etc/stargate/tls-secret"


@dataclass(frozen=True)
class RouterNames:
    router: str
    headless: str
    backend: str
    service_account: str
    backend_service_account: str
    pod_reader_role: str
    backend_role: str
    issuer: str
    certificate: str
    tls_secret: Optional[str]
    metrics: str
    backend_metrics: str
    policy: str
    backend_policy: str

    @classmethod
    def of(cls, router: RouterConfig) -> RouterNames:
        backend = backend_name(router)
        return cls(
            router=router.name,
            headless=headless_name(router),
            backend=backend,
            service_account=router.service_account or router.name,
            backend_service_account=router.backend_router.service_account or backend,
            pod_reader_role=f"{router.name}-pod-reader",
            backend_role=f"{backend}-endpointslice-reader",
            issuer=f"{router.name}-selfsigned",
            certificate=router.name,
            tls_secret=tls_secret_name(router),
            metrics=f"{router.name}-metrics",
            backend_metrics=f"{backend}-metrics",
            policy=f"{router.name}-ingress",
            backend_policy=f"{backend}-policy",
        )


def in_cluster(service: str, namespace: str) -> str:
    return f"{service}.{namespace}.svc.cluster.local"


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


def metadata(name: str, namespace: str, router: RouterConfig, component: str) -> dict:
    return {"name": name, "namespace": namespace, "labels": labels(router, component)}


def identity(router: RouterConfig) -> common.Identity:
    return common.Identity(router.uid, router.gid)


def container_security_context(router: RouterConfig) -> dict:
    # chart 0.16.2 values.yaml securityContext: read-only root, non-root, drop ALL.
    return {**common.container_security_context(identity(router)), "readOnlyRootFilesystem": True}


def pod_security_context(router: RouterConfig) -> dict:
    # chart 0.16.2 podSecurityContext: fsGroup (the TLS Secret's files are group-readable) and
    # seccomp RuntimeDefault; fsGroupChangePolicy keeps a remount from walking the volume.
    return common.pod_security_context(identity(router), fs_group=True)


def grace_seconds(router: RouterConfig) -> int:
    """chart 0.16.2 deployment.yaml/backend-router.yaml: the drain budget rounded up to whole
    seconds, plus 5 s for the process to exit after draining (30000 ms -> 35, 30001 -> 36)."""
    return (router.drain_timeout_ms + 999) // 1000 + 5


def resources(amounts) -> dict:
    return {
        "requests": {"cpu": amounts.requests.cpu, "memory": amounts.requests.memory},
        "limits": {"cpu": amounts.limits.cpu, "memory": amounts.limits.memory},
    }


def field_env(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def tls_volume(names: RouterNames) -> tuple[dict, dict]:
    """(volume, mount) of the TLS Secret, both keys in one directory (chart 0.16.2 mounts the
    items tls.crt and tls.key; Stargate polls the directory about every 30 s and reloads)."""
    volume = {"name": "stargate-tls", "secret": {
        "secretName": names.tls_secret, "defaultMode": 0o440,
        "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}],
    }}
    return volume, {"name": "stargate-tls", "mountPath": TLS_MOUNT, "readOnly": True}
