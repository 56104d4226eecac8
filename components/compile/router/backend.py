"""The backend router (chart 0.16.2 ``templates/backend-router*.yaml``), the ServiceMonitors and
the TLS objects.

The backend router is the router's own image run as ``stargate-k8s-router``. It watches the
EndpointSlices of the router's headless Service (ready or warming, not terminating; a pod's
identity is its ``targetRef.name``), hands pylons one entry per router pod, and forwards each
registration by its gRPC ``:authority`` and each QUIC tunnel by its SNI to the named pod. Each
replica terminates QUIC itself and cannot resume another replica's session, so its Service pins
clients (``sessionAffinity: ClientIP``).
"""

from __future__ import annotations

from typing import Optional

from ...config.router_names import dns_names
from ...config.stack import StackConfig
from .. import common
from .flags import backend_args
from .names import (
    BACKEND_COMMAND,
    BACKEND_COMPONENT,
    BACKEND_GRPC_PORT,
    BACKEND_HEALTH_PORT,
    BACKEND_LIVE_PATH,
    BACKEND_QUIC_PORT,
    READY_PATH,
    ROUTER_COMPONENT,
    TLS_CERT,
    TLS_MOUNT,
    TLS_SECRET_MOUNT,
    RouterNames,
    container_security_context,
    grace_seconds,
    labels,
    metadata,
    pod_security_context,
    resources,
    selector_labels,
    tls_volume,
)

CERT_MANAGER_GROUP = "cert-manager.io"
CERT_DURATION = "2160h"  # 90 days
CERT_RENEW_BEFORE = "360h"  # 15 days
# chart 0.16.2 templates/backend-router-rbac.yaml: <backend>-endpointslice-reader.
ENDPOINTSLICE_RULE = {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                      "verbs": ["get", "list", "watch"]}


TLS_CHAIN_CONTAINER = "tls-chain"
TLS_CHAIN_VOLUME = "stargate-tls-chain"
TLS_CHAIN_INTERVAL_S = 10
# busybox sh. Writes tls.crt = the Secret's tls.crt + its ca.crt (unless tls.crt already carries
# it: a self-signed certificate, or a Secret holding the full chain) and tls.key, each by rename,
# only when they changed, so the backend router's 30 s reload sees a renewal.
TLS_CHAIN_SCRIPT = f"""set -eu
umask 077
src={TLS_SECRET_MOUNT} dst={TLS_MOUNT}
while :; do
  if [ -s "$src/tls.crt" ] && [ -s "$src/tls.key" ]; then
    cat "$src/tls.crt" > "$dst/.tls.crt"
    if [ -s "$src/ca.crt" ] && ! grep -qxF "$(sed -n 2p "$src/ca.crt")" "$src/tls.crt"; then
      cat "$src/ca.crt" >> "$dst/.tls.crt"
    fi
    if ! cmp -s "$dst/.tls.crt" "$dst/tls.crt" || ! cmp -s "$src/tls.key" "$dst/tls.key"; then
      cp "$src/tls.key" "$dst/.tls.key"
      mv -f "$dst/.tls.key" "$dst/tls.key"
      mv -f "$dst/.tls.crt" "$dst/tls.crt"
    fi
  fi
  sleep {TLS_CHAIN_INTERVAL_S}
done
"""


def tls_chain_sidecar(stack: StackConfig, names: RouterNames) -> tuple[dict, list[dict]]:
    """(native sidecar, pod volumes): the backend router's serving chain.

    stargate-k8s-router verifies its onward QUIC hop to the router pods against the certificates
    in its own ``--tls-cert-path`` file and nothing else (NVIDIA/nvcf@fadc0f8
    ``crates/stargate-k8s-router/src/quic.rs``: the client config is built from that file; its
    ``--upstream-tls-cert-path`` is refused with ``--tunnel-protocol=raw-quic``). cert-manager's CA
    issuer writes only the leaf to ``tls.crt`` and the CA to ``ca.crt``, so with the Secret
    mounted as-is the router pods' leaf has no trusted issuer and every tunnel fails ("peer QUIC
    connect failed"). The file it gets is the chain ``tls.crt`` + ``ca.crt``: served to pylons
    (which trust ``ca.crt``) and trusted for the onward hop (the CA signs every router pod's
    leaf). Proven with a CA-issued leaf against the real binary in
    ``tests/conformance/test_backend_router.py``.

    A native sidecar (an init container with ``restartPolicy: Always``; Kubernetes 1.29+) rather
    than a one-shot init container: it keeps the chain current when cert-manager renews the
    leaf, and its startup probe holds the backend router back until the first chain is written.
    A new CA still needs a restart (the onward trust is read at start, as pylons read theirs).
    """
    router = stack.router
    secret, _ = tls_volume(names)
    secret = {"name": secret["name"], "secret": {"secretName": names.tls_secret, "defaultMode": 0o440}}
    sidecar = {
        "name": TLS_CHAIN_CONTAINER,
        "image": stack.platform.busybox_image,
        "restartPolicy": "Always",
        "command": ["/bin/sh", "-c", TLS_CHAIN_SCRIPT],
        "startupProbe": {"exec": {"command": ["test", "-s", TLS_CERT]}, "periodSeconds": 1,
                         "failureThreshold": 60},
        "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}, "limits": {"cpu": "50m", "memory": "16Mi"}},
        "volumeMounts": [{"name": secret["name"], "mountPath": TLS_SECRET_MOUNT, "readOnly": True},
                         {"name": TLS_CHAIN_VOLUME, "mountPath": TLS_MOUNT}],
        "securityContext": container_security_context(router),
    }
    chain = {"name": TLS_CHAIN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
    return sidecar, [secret, chain]


def compile_backend_deployment(stack: StackConfig, names: RouterNames) -> dict:
    router, platform = stack.router, stack.platform
    backend = router.backend_router
    container: dict = {
        "name": "backend-router",
        "image": backend.image or router.image,
        "command": [BACKEND_COMMAND],
        "args": backend_args(stack, names),
        "ports": [
            {"name": "grpc", "containerPort": BACKEND_GRPC_PORT, "protocol": "TCP"},
            {"name": "quic", "containerPort": BACKEND_QUIC_PORT, "protocol": "UDP"},
            {"name": "health", "containerPort": BACKEND_HEALTH_PORT, "protocol": "TCP"},
        ],
        "resources": resources(backend.resources),
        # /readyz is 200 only with at least one router pod and a loaded TLS identity.
        "readinessProbe": {"httpGet": {"path": READY_PATH, "port": "health"}, "periodSeconds": 2},
        "livenessProbe": {"httpGet": {"path": BACKEND_LIVE_PATH, "port": "health"}, "periodSeconds": 5},
        "securityContext": container_security_context(router),
    }
    pod_spec: dict = {
        "serviceAccountName": names.backend_service_account,
        # The one router pod that needs the API at length: it watches EndpointSlices.
        "automountServiceAccountToken": True,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(router),
        "terminationGracePeriodSeconds": grace_seconds(router),
        "containers": [container],
        # chart 0.16.2: soft anti-affinity, so two replicas still schedule on a one-node cluster.
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": selector_labels(router, BACKEND_COMPONENT)}},
        }]}},
        # The router's placement (config.router: the backend router goes where the router goes).
        **common.placement(router.node_selector, router.tolerations),
    }
    if router.tls.enabled:
        sidecar, volumes = tls_chain_sidecar(stack, names)
        container["volumeMounts"] = [{"name": TLS_CHAIN_VOLUME, "mountPath": TLS_MOUNT, "readOnly": True}]
        pod_spec["initContainers"] = [sidecar]
        pod_spec["volumes"] = volumes
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


def compile_backend_service(stack: StackConfig, names: RouterNames) -> dict:
    router = stack.router
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(names.backend, stack.platform.namespace, router, BACKEND_COMPONENT),
        "spec": {
            "type": "ClusterIP",
            "sessionAffinity": "ClientIP",
            "selector": selector_labels(router, BACKEND_COMPONENT),
            "ports": [
                {"name": "grpc", "port": BACKEND_GRPC_PORT, "targetPort": "grpc", "protocol": "TCP",
                 "appProtocol": "kubernetes.io/h2c"},
                {"name": "quic", "port": BACKEND_QUIC_PORT, "targetPort": "quic", "protocol": "UDP"},
                {"name": "health", "port": BACKEND_HEALTH_PORT, "targetPort": "health", "protocol": "TCP"},
            ],
        },
    }


def compile_service_monitor(stack: StackConfig, name: str, component: str, port: str) -> dict:
    """chart 0.16.2 servicemonitor.yaml (router: port metrics) and backend-router-servicemonitor.yaml
    (backend router: port health): /metrics every 30 s."""
    router, namespace = stack.router, stack.platform.namespace
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(name, namespace, router, component),
        "spec": {
            "selector": {"matchLabels": selector_labels(router, component)},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"port": port, "path": "/metrics", "interval": "30s"}],
        },
    }


def compile_self_signed_issuer(stack: StackConfig, names: RouterNames) -> dict:
    return {
        "apiVersion": f"{CERT_MANAGER_GROUP}/v1",
        "kind": "Issuer",
        "metadata": metadata(names.issuer, stack.platform.namespace, stack.router, ROUTER_COMPONENT),
        "spec": {"selfSigned": {}},
    }


def compile_certificate(stack: StackConfig, names: RouterNames) -> Optional[dict]:
    router, namespace = stack.router, stack.platform.namespace
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
            # Written names (or the Service's) plus the name pylons verify: with per-pod
            # hostnames, *.<headless>.<ns>.svc.cluster.local. All checked against allowedDomains.
            "dnsNames": list(dns_names(router, namespace)),
            "duration": CERT_DURATION,
            "renewBefore": CERT_RENEW_BEFORE,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["digital signature", "server auth"],
        },
    }
