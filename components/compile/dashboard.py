"""The Grafana dashboard of the models (``platform.metrics.dashboard``): one ConfigMap holding the
dashboard JSON, labelled for the Grafana dashboard sidecar.

Pure and deterministic: the JSON is generated from ``PANELS`` and the stack (its namespace and
model names) and serialised with sorted keys, so an unchanged stack renders byte-identical data
and `pulumi preview` shows no diff.

Series are selected by the labels the Prometheus Operator puts on every target of a
ServiceMonitor: ``namespace`` and ``service`` (the Service's name, which is the model's name on
the raw and the NIM operator path alike; prometheus-operator Documentation/user-guides/
running-exporters.md, "Default Labels"). So a panel shows one series per model without relying
on an engine's own labels (vLLM's ``model_name`` is the served model name, NIM's may differ).

Each panel has a query per engine, with the engine as its ``refId`` prefix (``vllm-…``,
``nim-…``): vLLM's names (``vllm:`` prefix; ones every release line exports:
components/config/vllm_lines/) and NIM for LLMs' documented names (no prefix; tests/fixtures/nim_llm_metrics.py). A model answers to the
queries of its engine only; the other engine's query returns nothing for it. NIM's documented
names (as stored; its table is cut short) include no preemption, prefix-cache or finished-request
counter, so those panels have a vLLM query only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Optional

from ..config.model import next_name
from ..config.stack import StackConfig
from . import common
from .gateway.monitoring import metrics_service_name

NAME = "llm-serving-dashboard"
DATA_KEY = "llm-serving.json"
COMPONENT = "dashboard"
SCHEMA_VERSION = 39  # Grafana 10/11 dashboard JSON
RATE = "$__rate_interval"  # Grafana's rate window: at least four scrape intervals
QUANTILES = ("0.5", "0.95")


@dataclass(frozen=True)
class Query:
    engine: str  # "vllm" or "nim": the refId prefix the metric-name contract test reads
    key: str  # unique within the panel
    expr: str  # with {sel} for the series selector
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    description: str
    queries: tuple[Query, ...]


def _gauge(engine: str, metric: str, how: str = "sum") -> Query:
    return Query(engine, "value", f"{how} by (service) ({metric}{{sel}})", "{{service}}")


def _quantiles(engine: str, histogram: str) -> tuple[Query, ...]:
    return tuple(
        Query(engine, f"p{percent}",
              f"histogram_quantile({q}, sum by (service, le) (rate({histogram}_bucket{{sel}}[{RATE}])))",
              f"{{{{service}}}} p{percent}")
        for q, percent in ((q, q[2:].ljust(2, "0")) for q in QUANTILES)
    )


def _rate(engine: str, key: str, counter: str, legend: str, by: str = "service") -> Query:
    return Query(engine, key, f"sum by ({by}) (rate({counter}{{sel}}[{RATE}]))", legend)


PANELS: tuple[Panel, ...] = (
    Panel("Requests running", "short", "Requests in the engine's running batch.",
          (_gauge("vllm", "vllm:num_requests_running"), _gauge("nim", "num_requests_running"))),
    Panel("Requests waiting", "short", "Requests queued for a place in the batch (the queue depth "
          "an autoscaler would act on).",
          (_gauge("vllm", "vllm:num_requests_waiting"), _gauge("nim", "num_requests_waiting"))),
    Panel("Time to first token", "s", "Median and 95th percentile, from the engine's histogram.",
          (*_quantiles("vllm", "vllm:time_to_first_token_seconds"),
           *_quantiles("nim", "time_to_first_token_seconds"))),
    Panel("Inter-token latency", "s", "Time between output tokens (time per output token), median "
          "and 95th percentile. vLLM 0.11 names it inter_token_latency_seconds.",
          (*_quantiles("vllm", "vllm:inter_token_latency_seconds"),
           *_quantiles("nim", "time_per_output_token_seconds"))),
    Panel("End-to-end request latency", "s", "Median and 95th percentile of whole requests.",
          (*_quantiles("vllm", "vllm:e2e_request_latency_seconds"),
           *_quantiles("nim", "e2e_request_latency_seconds"))),
    Panel("KV-cache usage", "percentunit", "Share of the KV cache in use (highest replica); near "
          "100% the engine preempts or queues requests.",
          (_gauge("vllm", "vllm:kv_cache_usage_perc", "max"), _gauge("nim", "gpu_cache_usage_perc", "max"))),
    Panel("Tokens per second", "short", "Prompt (prefill) and generated tokens processed per second.",
          (_rate("vllm", "prompt", "vllm:prompt_tokens_total", "{{service}} prompt"),
           _rate("vllm", "generation", "vllm:generation_tokens_total", "{{service}} generation"),
           _rate("nim", "prompt", "prompt_tokens_total", "{{service}} prompt"),
           _rate("nim", "generation", "generation_tokens_total", "{{service}} generation"))),
    Panel("Finished requests per second", "reqps", "By finish reason (stop, length, abort).",
          (_rate("vllm", "finished", "vllm:request_success_total", "{{service}} {{finished_reason}}",
                 by="service, finished_reason"),)),
    Panel("Preemptions per second", "short", "Requests evicted from the batch for lack of KV cache.",
          (_rate("vllm", "preemptions", "vllm:num_preemptions_total", "{{service}}"),)),
    Panel("Prefix-cache hit rate", "percentunit", "Share of queried prompt tokens found in the "
          "prefix cache.",
          (Query("vllm", "hit-rate",
                 f"sum by (service) (rate(vllm:prefix_cache_hits_total{{sel}}[{RATE}])) / "
                 f"sum by (service) (rate(vllm:prefix_cache_queries_total{{sel}}[{RATE}]))",
                 "{{service}}"),)),
)


# The gateway's row (with router.gateway on): its own counters (gateway.js, FAMILIES), per tenant
# and model, from the pods behind its metrics Service (compile.gateway.monitoring). refIds start
# with "gateway-"; the metric-name contract test reads those names from the script.
def _gateway_quantiles(histogram: str) -> tuple[Query, ...]:
    return tuple(
        Query("gateway", f"p{percent}",
              f"histogram_quantile({q}, sum by (tenant, model, le) (rate({histogram}_bucket{{sel}}[{RATE}])))",
              f"{{{{tenant}}}} {{{{model}}}} p{percent}")
        for q, percent in ((q, q[2:].ljust(2, "0")) for q in QUANTILES)
    )


GATEWAY_PANELS: tuple[Panel, ...] = (
    Panel("Gateway requests per second", "reqps", "Answered requests by tenant, model and status.",
          (_rate("gateway", "requests", "gateway_requests_total", "{{tenant}} {{model}} {{status}}",
                 by="tenant, model, status"),)),
    Panel("Gateway 429s per second", "reqps", "Requests refused by the tenants' limits, by the limit reached "
          "(requests or tokens).",
          (_rate("gateway", "limited", "gateway_rate_limited_total", "{{tenant}} {{limit}}", by="tenant, limit"),)),
    Panel("Gateway time to first byte", "s", "Until the router's first byte, median and 95th percentile.",
          _gateway_quantiles("gateway_time_to_first_byte_seconds")),
    Panel("Gateway request duration", "s", "Until the end of the answer, median and 95th percentile.",
          _gateway_quantiles("gateway_request_duration_seconds")),
    Panel("Gateway tokens per second", "short", "Prompt and completion tokens the engines reported, by tenant.",
          (_rate("gateway", "prompt", "gateway_prompt_tokens_total", "{{tenant}} prompt", by="tenant"),
           _rate("gateway", "completion", "gateway_completion_tokens_total", "{{tenant}} completion", by="tenant"))),
)


def uid(namespace: str) -> str:
    """Grafana uids are at most 40 characters; one dashboard per stack namespace."""
    return f"llm-serving-{hashlib.sha256(namespace.encode()).hexdigest()[:12]}"


def selector(namespace: str) -> str:
    return f'{{namespace="{namespace}", service=~"$model"}}'


def _panel(index: int, panel: Panel, namespace: str, sel: Optional[str] = None, y: int = 0, offset: int = 0) -> dict:
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    sel = sel or selector(namespace)
    return {
        "id": offset + index + 1,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": datasource,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": y + 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": [
            {"refId": f"{q.engine}-{q.key}", "datasource": datasource,
             "expr": q.expr.replace("{sel}", sel), "legendFormat": q.legend}
            for q in panel.queries
        ],
    }


def _variables(models: list[str]) -> list[dict]:
    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "hide": 0, "current": {}},
        {
            # The stack's models, as rendered: the variable follows the config, not what
            # Prometheus happens to hold (a model that never served still has its panels).
            "name": "model", "label": "Model", "type": "custom", "query": ",".join(models),
            "multi": True, "includeAll": True, "hide": 0,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [{"selected": False, "text": m, "value": m} for m in models],
        },
    ]


def dashboard(stack: StackConfig) -> dict:
    namespace = stack.platform.namespace
    # A next revision (models[].next) is its own choice: its Service and its gateway series are
    # `<model>-next`, so every panel shows the two revisions side by side.
    models = sorted(name for m in stack.models for name in (m.name, *((next_name(m),) if m.next else ())))
    return {
        "uid": uid(namespace),
        "title": f"LLM serving: {namespace}",
        "tags": ["llm-serving", "vllm", "nim"],
        "editable": True,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": _variables(models)},
        "panels": [_panel(i, panel, namespace) for i, panel in enumerate(PANELS)] + _gateway_row(stack),
    }


def _gateway_row(stack: StackConfig) -> list[dict]:
    if stack.router is None or not stack.router.gateway.enabled:
        return []
    namespace = stack.platform.namespace
    service = metrics_service_name(stack.router.gateway.resolved_name(stack.router.name))
    sel = f'{{namespace="{namespace}", service="{service}"}}'
    y = 8 * ((len(PANELS) + 1) // 2)
    offset = len(PANELS) + 1
    row = {"id": offset, "type": "row", "title": "Gateway", "collapsed": False, "panels": [],
           "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}}
    return [row] + [_panel(i, panel, namespace, sel, y + 1, offset) for i, panel in enumerate(GATEWAY_PANELS)]


def dashboard_json(stack: StackConfig) -> str:
    return json.dumps(dashboard(stack), sort_keys=True, indent=1)


def compile_dashboard(stack: StackConfig) -> Optional[dict]:
    """The dashboard ConfigMap, or None when metrics or the dashboard are off."""
    metrics = stack.platform.metrics
    if not metrics.dashboard_on:
        return None
    labels = {
        **dict(metrics.dashboard.labels),
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/component": COMPONENT,
        "app.kubernetes.io/part-of": common.PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": metrics.dashboard.namespace or stack.platform.namespace,
                     "labels": labels},
        "data": {DATA_KEY: dashboard_json(stack)},
    }
