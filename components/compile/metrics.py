"""Prometheus scraping of the models (``platform.metrics``): a ServiceMonitor per raw-path model,
``spec.metrics`` for operator-path NIMServices, and the CRD the cluster must serve for either.

Pure: typed config in, wire-shape dicts out.

Why a ServiceMonitor (not a PodMonitor): every raw-path model already has a Service whose port
``http`` reaches exactly its server pods; the router's monitors (llm-request-router chart
0.16.2) and the NIM operator's (k8s-nim-operator, ``NIMService.GetServiceMonitorParams``) are
ServiceMonitors too, so one CRD and one ``serviceMonitorSelector`` cover the whole stack, and the
Prometheus Operator labels every sample with the Service's name (``service``), which is the
model's name on both paths: the dashboard selects models by it, whatever labels an engine sets.

Where the engines serve metrics (both on the serving port, so the model's NetworkPolicy, which
opens that port to ``allowFrom``, already admits the scraper):

- vLLM: ``/metrics`` on the OpenAI API server's port (vLLM v0.11, vllm/entrypoints/openai/
  api_server.py mounts the Prometheus ASGI app at /metrics);
- NIM for LLMs: ``/v1/metrics`` on the HTTP API port (NIM for LLMs docs, "Observability"; the
  NIM operator scrapes ``/v1/metrics`` on the ``api`` port).
"""

from __future__ import annotations

from typing import Optional

from ..config.model import ModelConfig
from ..config.stack import StackConfig
from . import common
from .engines import server_of

API_VERSION = "monitoring.coreos.com/v1"
CRD = "servicemonitors.monitoring.coreos.com"
CRD_VERSION = "v1"
MONITOR_COMPONENT = "metrics"
# The raw path's Service port (compile.server.compile_service) and the server pods' component.
SERVICE_PORT_NAME = "http"
SERVER_COMPONENT = "server"
CRD_FIX = ("install the Prometheus Operator with its CRDs (e.g. the kube-prometheus-stack chart), "
           "or set platform.metrics.enabled: false")


def monitor_name(model: ModelConfig) -> str:
    return model.name  # the Service's name; model names are at most 45 characters


def metrics_path(model: ModelConfig) -> str:
    return server_of(model).metrics_path


def compile_service_monitor(model: ModelConfig, stack: StackConfig) -> Optional[dict]:
    """The raw-path model's ServiceMonitor, or None when metrics are off or the NIM operator
    scrapes the model itself (operator path: ``nim_service_metrics``)."""
    metrics, namespace = stack.platform.metrics, stack.platform.namespace
    if not metrics.enabled or model.on_operator:
        return None
    meta = common.metadata(monitor_name(model), namespace, model, MONITOR_COMPONENT)
    # Ours win over `labels`: the config refuses our prefixes, this keeps the rule in one place.
    meta["labels"] = {**dict(metrics.labels), **meta["labels"]}
    return {
        "apiVersion": API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": meta,
        "spec": {
            # The model's Service (its labels carry the same selector subset as its pods).
            "selector": {"matchLabels": common.selector_labels(model, SERVER_COMPONENT)},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"port": SERVICE_PORT_NAME, "path": metrics_path(model), "interval": metrics.interval}],
        },
    }


def nim_service_metrics(stack: StackConfig) -> Optional[dict]:
    """``spec.metrics`` of an operator-path NIMService (k8s-nim-operator api/apps/v1alpha1
    ``Metrics``: ``enabled`` and ``serviceMonitor`` {``additionalLabels``, ``annotations``,
    ``interval``, ``scrapeTimeout``}); the operator then renders a ServiceMonitor selecting the
    NIMService's Service by its labels, scraping ``/v1/metrics`` on port ``api``. Its webhook
    wants ``serviceMonitor`` non-empty when enabled: ``interval`` always is."""
    metrics = stack.platform.metrics
    if not metrics.enabled:
        return None
    monitor: dict = {"interval": metrics.interval}
    if metrics.labels:
        monitor["additionalLabels"] = dict(metrics.labels)
    return {"enabled": True, "serviceMonitor": monitor}


def required_crds(stack: StackConfig) -> list[dict]:
    """What the models' scraping needs on the cluster (``providers.crd_check`` wire shape)."""
    if not stack.platform.metrics.enabled or not stack.models:
        return []
    return [{"field": "platform.metrics.enabled", "crds": [CRD], "version": CRD_VERSION, "fix": CRD_FIX}]
