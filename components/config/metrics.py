"""The `platform.metrics` section: Prometheus scraping of every model and a Grafana dashboard.

Scraping goes through the Prometheus Operator (a ServiceMonitor per model on the raw path, the
NIMService's own ``spec.metrics`` on the NIM operator path), so the stack needs its CRDs; the
preview checks for them. The dashboard is a ConfigMap the Grafana dashboard sidecar picks up by
label: the grafana chart's ``sidecar.dashboards.label`` is ``grafana_dashboard`` (``labelValue``
empty: any value), and kube-prometheus-stack sets ``labelValue: "1"`` and ``searchNamespace: ALL``
(grafana/helm-charts charts/grafana README and kube-prometheus-stack's values, as stored), so
``grafana_dashboard: "1"`` is found by both.
"""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field, field_validator, model_validator

from . import values
from .types import Dns1123Label, Strict
from .values import Problem

# A Prometheus Operator `Duration` (monitoring.coreos.com/v1, the pattern its CRDs declare):
# units from years down to milliseconds, largest first, e.g. 30s, 1m30s. Zero is refused here
# too: a zero scrape interval is not a schedule.
_DURATION = re.compile(r"^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$")
# Label keys: an optional DNS-subdomain prefix and a name of at most 63 characters; values at
# most 63 characters of the same alphabet, or empty (Kubernetes' label syntax).
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Label prefixes the stack sets itself: a user label there would override ours (and a selector).
RESERVED_PREFIXES = ("app.kubernetes.io/", "llm-serving.dev/")
# Found by the grafana chart's sidecar (label grafana_dashboard, any value) and by
# kube-prometheus-stack's (labelValue "1").
SIDECAR_LABELS = {"grafana_dashboard": "1"}


def label_problems(labels: dict[str, str], where: str) -> list[Problem]:
    problems = []
    for key, value in sorted(labels.items()):
        prefix, _, name = key.rpartition("/")
        if not _LABEL_NAME.match(name) or (prefix and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix))):
            problems.append(Problem(f"{where}.{key}", "is not a label key; write an optional DNS prefix and "
                                    "a name of letters, digits, '-', '_' and '.', e.g. release"))
        elif key.startswith(RESERVED_PREFIXES):
            problems.append(Problem(f"{where}.{key}", "is a label the stack sets itself; choose another key "
                                    "(e.g. release: kube-prometheus-stack)"))
        if value and not _LABEL_NAME.match(value):
            problems.append(Problem(f"{where}.{key}", f"'{value}' is not a label value; at most 63 letters, "
                                    "digits, '-', '_' and '.', starting and ending with a letter or digit"))
    return problems


class DashboardConfig(Strict):
    """The Grafana dashboard: one ConfigMap holding its JSON."""

    enabled: bool = Field(
        True, description="Render the dashboard ConfigMap `llm-serving-dashboard` (with "
        "`metrics.enabled`): requests running/waiting, time to first token, inter-token "
        "latency, end-to-end latency, KV-cache usage, tokens/s, finished requests and "
        "preemptions, per model (a `model` variable).",
    )
    labels: dict[str, str] = Field(
        default_factory=lambda: dict(SIDECAR_LABELS),
        description="Labels the Grafana dashboard sidecar looks for. Default `grafana_dashboard: \"1\"`: "
        "the grafana chart's sidecar matches label `grafana_dashboard` with any value, "
        "kube-prometheus-stack's with value `1`.",
    )
    namespace: Optional[Dns1123Label] = Field(
        None, description="Namespace of the ConfigMap; unset: the stack's namespace. The grafana "
        "chart's sidecar reads only Grafana's namespace unless `sidecar.dashboards.searchNamespace` "
        "says otherwise (kube-prometheus-stack sets `ALL`): name Grafana's namespace here when its "
        "sidecar does not search the stack's. A ConfigMap outside the stack's namespace is not "
        "covered by `teardownIdentity`.",
    )

    @model_validator(mode="after")
    def _findable(self) -> DashboardConfig:
        problems = label_problems(self.labels, "labels")
        if self.enabled and not self.labels:
            problems.append(Problem("labels", "the Grafana sidecar finds dashboards by label, and none is "
                                    "set; write e.g. {grafana_dashboard: \"1\"}"))
        if problems:
            raise values.Problems(problems)
        return self


class MetricsConfig(Strict):
    """Prometheus scraping of the model servers (Prometheus Operator) and a Grafana dashboard."""

    enabled: bool = Field(
        False, description="Scrape every model: a ServiceMonitor per raw-path model (vLLM: "
        "`/metrics`, NIM: `/v1/metrics`, on the serving port), and `spec.metrics` on "
        "operator-path NIMServices (the NIM operator renders their ServiceMonitor). Needs the "
        "Prometheus Operator's CRDs (checked at preview). With `networkPolicy`, `allowFrom` must "
        "admit the Prometheus pods.",
    )
    interval: str = Field("30s", description="Scrape interval (a Prometheus duration, e.g. 15s, 1m).")
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels on the ServiceMonitors (and the NIMServices' "
        "`serviceMonitor.additionalLabels`), for the Prometheus' `serviceMonitorSelector`: "
        "kube-prometheus-stack selects `release: <its release name>` by default.",
    )
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig, description="The Grafana dashboard.")

    @field_validator("interval")
    @classmethod
    def _duration(cls, interval: str) -> str:
        if not interval or not _DURATION.match(interval) or not any(ch in "123456789" for ch in interval):
            raise ValueError(f"'{interval}' is not a Prometheus duration; write e.g. 30s, 1m or 1m30s")
        return interval

    @model_validator(mode="after")
    def _labels(self) -> MetricsConfig:
        problems = label_problems(self.labels, "labels")
        if problems:
            raise values.Problems(problems)
        return self

    @property
    def dashboard_on(self) -> bool:
        return self.enabled and self.dashboard.enabled
