"""Prometheus scraping of the gateway (``platform.metrics``): a Service for the health port and a
ServiceMonitor on it.

The counters live in each replica (gateway.js, ``observe``), so every pod is scraped: the
ServiceMonitor's endpoints are the pods behind the Service. The metrics are on the health port
(8081, ``/metrics``), not the API port, and get a ClusterIP Service of their own: the gateway's
Service may be a LoadBalancer, which must not publish them. With ``platform.networkPolicy`` the
health port admits only ``allowFrom`` (where Prometheus must be listed, as for the models).
"""

from __future__ import annotations

from typing import Optional

from ...config.stack import StackConfig
from ..metrics import API_VERSION, CRD, CRD_FIX, CRD_VERSION
from ..router.names import labels, selector_labels
from ..router.network import GATEWAY_COMPONENT
from .nginx import HEALTH_PORT, METRICS_PATH

METRICS_COMPONENT = "gateway-metrics"
PORT_NAME = "metrics"


def metrics_service_name(gateway_name: str) -> str:
    return f"{gateway_name}-metrics"  # GatewayConfig.object_names, which the config checks for collisions


def compile_metrics_service(stack: StackConfig, gateway_name: str) -> Optional[dict]:
    if not stack.platform.metrics.enabled:
        return None
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": metrics_service_name(gateway_name), "namespace": stack.platform.namespace,
                         "labels": labels(stack.router, METRICS_COMPONENT)},
            "spec": {"type": "ClusterIP", "selector": selector_labels(stack.router, GATEWAY_COMPONENT),
                     "ports": [{"name": PORT_NAME, "port": HEALTH_PORT, "targetPort": "health", "protocol": "TCP"}]}}


def compile_service_monitor(stack: StackConfig, gateway_name: str) -> Optional[dict]:
    metrics = stack.platform.metrics
    if not metrics.enabled:
        return None
    # Ours win over `labels` (the config refuses our prefixes; this keeps the rule in one place).
    meta_labels = {**dict(metrics.labels), **labels(stack.router, METRICS_COMPONENT)}
    return {"apiVersion": API_VERSION, "kind": "ServiceMonitor",
            "metadata": {"name": metrics_service_name(gateway_name), "namespace": stack.platform.namespace,
                         "labels": meta_labels},
            "spec": {"selector": {"matchLabels": selector_labels(stack.router, METRICS_COMPONENT)},
                     "namespaceSelector": {"matchNames": [stack.platform.namespace]},
                     "endpoints": [{"port": PORT_NAME, "path": METRICS_PATH, "interval": metrics.interval}]}}


def required_crds(service_monitor: Optional[dict]) -> list[dict]:
    """The ServiceMonitor's CRD, checked before anything is created (providers.crd_check)."""
    if service_monitor is None:
        return []
    return [{"field": "platform.metrics.enabled", "crds": [CRD], "version": CRD_VERSION, "fix": CRD_FIX}]
