"""A model's autoscaling on queue depth, and the platform's defaults for it.

The mechanism is KEDA: a ScaledObject with a Prometheus trigger (rendered by
``components/compile/autoscaling.py``). Chosen over an HPA on custom metrics because KEDA queries
Prometheus itself: an HPA on a queue-depth metric needs the custom/external metrics API, which
means installing prometheus-adapter and writing its discovery rules for every metric; KEDA needs
its own chart only, and it creates and owns the HPA that does the scaling.

Here: the section and what it holds alone; what a setting must be given the model's other
settings (``autoscaling_problems``) and the one answer to "may this model run more than one
replica?" (``replica_ceiling``) are in ``model.py``, which sees the whole model.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator

from . import values
from .types import Strict

# The Prometheus Operator creates the Service `prometheus-operated` for the Prometheus servers of
# its namespace; kube-prometheus-stack in `monitoring` (the namespace platform.networkPolicy
# admits by default) answers there.
DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


class AutoscalingPlatform(Strict):
    """Where autoscaled models' queue depth is read, for every model with `autoscaling.enabled`."""

    prometheus_address: str = Field(
        DEFAULT_PROMETHEUS, description="Prometheus that scrapes the models, as KEDA's operator reaches "
        "it from inside the cluster (never loopback). Default: the `prometheus-operated` Service of a "
        "kube-prometheus-stack installed in namespace `monitoring`.",
    )
    require_model_metrics: bool = Field(
        True, description="Refuse an autoscaled model unless `platform.metrics.enabled` makes Prometheus "
        "scrape it (a ServiceMonitor per model): without a scrape the queue depth is never known, and "
        "KEDA only reports an error on the ScaledObject. Set false when the cluster's Prometheus "
        "already scrapes the model pods another way.",
    )
    polling_interval_seconds: int = Field(
        30, ge=5, le=3600, description="How often KEDA queries the queue depth (its "
        "`pollingInterval`; 30 is KEDA's own default).",
    )

    @field_validator("prometheus_address")
    @classmethod
    def _in_cluster_url(cls, url: str) -> str:
        try:
            return values.check_cluster_reachable_url(url)
        except ValueError:
            raise ValueError(f"'{url}' is not an http(s) URL KEDA's operator can reach from inside the "
                             f"cluster; write e.g. '{DEFAULT_PROMETHEUS}'") from None


class Autoscaling(Strict):
    """Replicas follow the model's queue of waiting requests (KEDA ScaledObject, Prometheus trigger)."""

    enabled: bool = Field(
        False, description="Scale the server Deployment between `minReplicas` and `maxReplicas` on the "
        "requests waiting in vLLM's queue (`vllm:num_requests_waiting`), through a KEDA ScaledObject "
        "(KEDA and its CRDs must be installed; Prometheus must scrape the model). KEDA rather than an "
        "HPA on custom metrics: KEDA queries Prometheus itself, an HPA would need prometheus-adapter "
        "and a rule for the metric. The Deployment then "
        "carries no replica count, so `pulumi up` never resets what the autoscaler chose. vLLM only, "
        "ReadWriteMany weights only; `replicas` must be unset.",
    )
    min_replicas: int = Field(
        1, ge=0, description="Fewest replicas. 0: the model sleeps once it has had no request for "
        "`idleSeconds` (KEDA scales its Deployment to zero; its weights stay on their volume) and wakes "
        "on the next request, which the gateway holds meanwhile (`router.gateway.hold`, required: the "
        "model must be fronted by the router and its gateway). The first request after a sleep waits "
        "for a pod to start and load the weights (minutes on a GPU; see docs/05-day-2.md).",
    )
    idle_seconds: int = Field(
        900, ge=60, le=86400, description="With `minReplicas: 0`: how long the model must see no "
        "request (none held, none answered in the last two minutes, none running, none queued) "
        "before it is scaled to zero (KEDA's `cooldownPeriod`).",
    )
    max_replicas: Optional[int] = Field(
        None, ge=1, description="Most replicas (required when enabled; each one takes `gpus` GPUs).",
    )
    target_queue_depth: int = Field(
        5, ge=1, description="Waiting requests per replica the autoscaler aims for: replicas = "
        "ceil(waiting requests of all replicas / this). vLLM queues a request only when its running "
        "batch is full, so any queue is saturation; 5 scales on a sustained queue, not on one burst.",
    )
    scale_down_stabilization_seconds: int = Field(
        600, ge=0, le=3600, description="How long the queue must stay low before a replica is removed "
        "(the HPA's `behavior.scaleDown.stabilizationWindowSeconds`; the HPA's default is 300). Longer "
        "by default because a replica removed in a lull takes minutes to load again. KEDA's "
        "`cooldownPeriod` is not this: it only applies to scaling to zero.",
    )


# Served by the KEDA chart: the ScaledObject CRD (keda.sh/v1alpha1).
KEDA_CRD, KEDA_VERSION = "scaledobjects.keda.sh", "v1alpha1"
KEDA_FIX = ("install KEDA with its CRDs (helm repo add kedacore https://kedacore.github.io/charts && helm "
            "install keda kedacore/keda -n keda --create-namespace), or set autoscaling.enabled: false")
