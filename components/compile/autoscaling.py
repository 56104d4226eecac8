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
from ..config.model import ModelConfig, may_sleep
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
# A model that may sleep (minReplicas: 0) is woken and kept awake by the gateway's counters
# (gateway.js: FAMILIES and heldLines; labelled `model`, and `namespace` by the ServiceMonitor
# that scrapes the gateway): at zero there is no vLLM pod to scrape, so only the gateway knows
# that someone is waiting. And by vLLM's running requests while it serves.
HELD_METRIC = "gateway_held_requests"
REQUESTS_METRIC = "gateway_requests_total"
RUNNING_METRIC = "vllm:num_requests_running"
# Requests answered this recently keep the model awake (2x the default 30 s scrape interval, so
# one answered request is always in two scrapes).
RECENT_WINDOW = "2m"
# The "recent traffic" trigger only activates (keeps the model above zero): its threshold is far
# beyond any request rate, so the HPA never adds a replica for it.
ACTIVITY_ONLY_THRESHOLD = "1000000"


def autoscaled(model: ModelConfig) -> bool:
    return model.autoscaling.enabled


def replicas_field(model: ModelConfig) -> dict:
    """The Deployment's ``spec.replicas``, or nothing when the autoscaler owns the count."""
    return {} if autoscaled(model) else {"replicas": model.replicas}


def _own_pods(model: ModelConfig) -> str:
    """With a next revision (models[].next), whose engine reports the same model_name: the
    model's own pods only, by the Service its ServiceMonitor scrapes (the revision's is
    `<model>-next`). Left out otherwise, so other stacks' queries stay as they were."""
    return f',service="{model.name}"' if model.next is not None else ""


def queue_query(model: ModelConfig, stack: StackConfig) -> str:
    """The model's waiting requests over all its replicas. `namespace` is the label Prometheus
    Operator scrapes (ServiceMonitor, PodMonitor) attach: two stacks serving one model name in
    two namespaces stay apart."""
    return f'sum({QUEUE_METRIC}{{namespace="{stack.platform.namespace}",model_name="{model.name}"{_own_pods(model)}}})'


def held_query(model: ModelConfig, stack: StackConfig) -> str:
    """Requests the gateway replicas hold for the model now (the wake signal)."""
    return f'sum({HELD_METRIC}{{namespace="{stack.platform.namespace}",model="{model.name}"}})'


def activity_query(model: ModelConfig, stack: StackConfig) -> str:
    """Requests answered in the last RECENT_WINDOW plus those running now: above zero, the model is
    in use. Each side is 0 when it has no series (no answer yet, no vLLM pod at zero)."""
    ns = stack.platform.namespace
    answered = f'sum(increase({REQUESTS_METRIC}{{namespace="{ns}",model="{model.name}"}}[{RECENT_WINDOW}]))'
    running = f'sum({RUNNING_METRIC}{{namespace="{ns}",model_name="{model.name}"{_own_pods(model)}}})'
    return f"({answered} or vector(0)) + ({running} or vector(0))"


def _prometheus_trigger(stack: StackConfig, query: str, threshold: str, activation: Optional[str] = None) -> dict:
    metadata = {
        "serverAddress": stack.platform.autoscaling.prometheus_address,
        "query": query,
        "threshold": threshold,
        # An empty answer means Prometheus does not scrape what the query reads: an error on the
        # ScaledObject, not a zero that scales a busy model down.
        "ignoreNullValues": "false",
    }
    if activation is not None:
        # Active (above zero replicas) while the value is above this.
        metadata["activationThreshold"] = activation
    # AverageValue: the HPA divides the query's total by the replica count, so the threshold is
    # what each replica may hold.
    return {"type": "prometheus", "metricType": "AverageValue", "metadata": metadata}


def _wake_triggers(model: ModelConfig, stack: StackConfig) -> list[dict]:
    """minReplicas 0: KEDA scales to zero once every trigger has been inactive for cooldownPeriod,
    and back to one when one is active. The queue trigger alone would put a serving model to sleep
    (vLLM queues only when its batch is full), and it cannot wake one (no pod to scrape at zero):
    the held requests wake it (and count as queue for scaling up), recent traffic keeps it awake."""
    if not may_sleep(model):
        return []
    depth = str(model.autoscaling.target_queue_depth)
    return [_prometheus_trigger(stack, held_query(model, stack), depth, activation="0"),
            _prometheus_trigger(stack, activity_query(model, stack), ACTIVITY_ONLY_THRESHOLD, activation="0")]


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
            **({"cooldownPeriod": scaling.idle_seconds} if may_sleep(model) else {}),
            "triggers": [_prometheus_trigger(stack, queue_query(model, stack), str(scaling.target_queue_depth)),
                         *_wake_triggers(model, stack)],
        },
    }


def required_crds(model: ModelConfig) -> list[dict]:
    """Other operators' CRDs this model's objects need, per setting, with the fix (checked at
    preview by providers.crd_check, as the router's are)."""
    if not autoscaled(model):
        return []
    return [{"field": "autoscaling.enabled", "crds": [KEDA_CRD], "version": KEDA_VERSION, "fix": KEDA_FIX}]
