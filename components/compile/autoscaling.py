"""A model's KEDA ScaledObject: its server Deployment's replicas follow vLLM's request queue.

Pure: typed config in, wire-shape dicts out. Why KEDA (and not an HPA on custom metrics) is in
``components/config/autoscaling.py``. When a model autoscales, its Deployment carries no
``spec.replicas`` (``replicas_field``): pulumi-kubernetes applies server-side, so a field the
manifest leaves out is not the stack's, and the count the HPA (which KEDA creates) writes through
the scale subresource stays. With the field in the manifest, every `up` would reset it.
"""

from __future__ import annotations

from typing import Optional

from ..config.autoscaling import KEDA_CRD, KEDA_FIX, KEDA_VERSION
from ..config.model import ModelConfig
from ..config.stack import StackConfig
from . import common

# keda.sh/v1alpha1 ScaledObject, as KEDA 2.16 serves it (chart kedacore/keda 2.16.1,
# templates/crds/crd-scaledobjects.yaml).
KEDA_API_VERSION = f"keda.sh/{KEDA_VERSION}"
AUTOSCALER_COMPONENT = "autoscaler"
# vLLM's scheduler queue: a Gauge labelled `model_name` (the served model name, which is the
# model's name here: --served-model-name) and `engine` (one series per engine core; summed).
# vllm-project/vllm vllm/v1/metrics/loggers.py, PrometheusStatLogger, the 0.11 line.
QUEUE_METRIC = "vllm:num_requests_waiting"


def autoscaled(model: ModelConfig) -> bool:
    return model.autoscaling.enabled


def replicas_field(model: ModelConfig) -> dict:
    """The Deployment's ``spec.replicas``, or nothing when the autoscaler owns the count."""
    return {} if autoscaled(model) else {"replicas": model.replicas}


def queue_query(model: ModelConfig, stack: StackConfig) -> str:
    """The model's waiting requests over all its replicas. `namespace` is the label Prometheus
    Operator scrapes (ServiceMonitor, PodMonitor) attach: two stacks serving one model name in
    two namespaces stay apart."""
    return f'sum({QUEUE_METRIC}{{namespace="{stack.platform.namespace}",model_name="{model.name}"}})'


def compile_scaled_object(model: ModelConfig, stack: StackConfig) -> Optional[dict]:
    if not autoscaled(model):
        return None
    scaling, platform = model.autoscaling, stack.platform
    names = common.ModelNames.of(model)
    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": "ScaledObject",
        "metadata": common.metadata(names.server, platform.namespace, model, AUTOSCALER_COMPONENT),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": names.server},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": platform.autoscaling.polling_interval_seconds,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleDown": {"stabilizationWindowSeconds": scaling.scale_down_stabilization_seconds}}}},
            "triggers": [{
                "type": "prometheus",
                # AverageValue: the HPA divides the query's total by the replica count, so the
                # threshold is the queue each replica may hold.
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": platform.autoscaling.prometheus_address,
                    "query": queue_query(model, stack),
                    "threshold": str(scaling.target_queue_depth),
                    # An empty answer means Prometheus does not scrape the model: an error on the
                    # ScaledObject, not a queue of zero that scales a busy model down.
                    "ignoreNullValues": "false",
                },
            }],
        },
    }


def required_crds(model: ModelConfig) -> list[dict]:
    """Other operators' CRDs this model's objects need, per setting, with the fix (checked at
    preview by providers.crd_check, as the router's are)."""
    if not autoscaled(model):
        return []
    return [{"field": "autoscaling.enabled", "crds": [KEDA_CRD], "version": KEDA_VERSION, "fix": KEDA_FIX}]
