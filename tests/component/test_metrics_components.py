"""platform.metrics under Pulumi mocks: the platform checks the Prometheus Operator's CRD once
and every model waits on that check; a raw-path model's ServiceMonitor follows its Service; the
dashboard ConfigMap is the platform's; rendering declares no check."""

from __future__ import annotations

import pulumi
import pytest

import providers.resources as dynamic_resources
from tests.support.component_kit import declare_stack, record_graph

NIM_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"
MODELS = [
    {"name": "alpha", "source": {"repo": "org/alpha"}, "resources": {"memory": "8Gi"}},
    {"name": "op", "engine": "nim", "path": "operator", "image": NIM_IMAGE, "source": {"repo": "org/op"},
     "resources": {"memory": "8Gi"}, "nim": {"authSecret": "ngc-api"}},
]


def raw(metrics: dict | None = None, **cluster) -> dict:
    platform = {"sharedMemorySizeLimit": "1Gi"}
    if metrics is not None:
        platform["metrics"] = metrics
    return {"platform": platform, "models": MODELS, **({"cluster": cluster} if cluster else {})}


@pytest.fixture
def graph(monkeypatch):
    return record_graph(monkeypatch, (dynamic_resources, "RequiredCrds"), (dynamic_resources, "NimOperatorCheck"))


def declare(config: dict):
    return list(declare_stack(config)[1].servers.values())


@pulumi.runtime.test
def test_one_crd_check_gates_every_model(graph):
    declare(raw({"enabled": True}))
    checks = [name for name in graph.props if name.endswith(("crd-check", "required-crds"))]
    assert checks == ["platform-required-crds"]
    props = graph.props["platform-required-crds"]
    assert props["requirements"][0]["crds"] == ["servicemonitors.monitoring.coreos.com"]
    assert props["requirements"][0]["field"] == "platform.metrics.enabled"
    # Every CRD of the stack at once: the operator-path model's too, under the name its own check uses.
    assert props["requirements"][1]["field"] == "model op uses path: operator"
    # The first child of each model waits on it (through the platform's `ready`).
    assert "platform-required-crds" in graph.depends("alpha-weights")
    assert "platform-required-crds" in graph.depends("op-nim-operator-check")


@pulumi.runtime.test
def test_the_monitor_follows_the_service_and_the_dashboard_is_the_platforms(graph):
    declare(raw({"enabled": True}))
    assert graph.depends("alpha-service-monitor") == ["alpha-service"]
    assert graph.manifests["alpha-service-monitor"]["kind"] == "ServiceMonitor"
    assert "op-service-monitor" not in graph.manifests  # the NIM operator renders its own
    assert graph.manifests["op-nim-service"]["spec"]["metrics"]["enabled"] is True
    assert graph.manifests["platform-dashboard"]["kind"] == "ConfigMap"
    assert graph.depends("platform-dashboard") == ["platform-namespace"]


@pulumi.runtime.test
def test_metrics_off_declare_none_of_it(graph):
    declare(raw())
    assert not [n for n in graph.objects if "monitor" in n or "dashboard" in n]
    # The operator-path model's CRDs are still checked by the platform first.
    assert graph.props["platform-required-crds"]["requirements"][0]["field"] == "model op uses path: operator"


@pulumi.runtime.test
def test_rendering_declares_the_objects_but_no_check(graph, tmp_path):
    declare(raw({"enabled": True}, renderYamlToDirectory=str(tmp_path)))
    assert "platform-required-crds" not in graph.objects
    assert "alpha-service-monitor" in graph.manifests and "platform-dashboard" in graph.manifests
