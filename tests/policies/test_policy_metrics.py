"""llm-serving-stack-monitor-selects-service: a ServiceMonitor that finds no Service, or names a
port its Services lack, scrapes nothing; the compiled stack (platform.metrics on) passes."""

from __future__ import annotations

import pytest

from policies.rules import metrics
from tests.support.policy_helpers import STACK, Case, World, check_case, compiled_manifests, compliant, deep, run


def _monitor(world, model: str = "qwen") -> dict:
    return world.get("ServiceMonitor", model)


FAIL_CASES = [
    Case(metrics.monitor_selects_service, "selector names another label value",
         lambda w: _monitor(w)["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/name": "qwen2"}),
         "ServiceMonitor 'qwen' selects no Service of the stack"),
    Case(metrics.monitor_selects_service, "scrapes the wrong namespace",
         lambda w: _monitor(w)["spec"]["namespaceSelector"].update(matchNames=["monitoring"]),
         "selects no Service of the stack"),
    Case(metrics.monitor_selects_service, "port the Service does not name",
         lambda w: _monitor(w)["spec"]["endpoints"][0].update(port="metrics"),
         "endpoints[0].port 'metrics' is a named port of no Service it selects"),
    Case(metrics.monitor_selects_service, "the model's Service is gone",
         lambda w: w.removed.add("llama-service"),
         "ServiceMonitor 'llama' selects no Service of the stack"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    found = check_case(case)
    assert all(f.urn and f.urn.startswith("urn:pulumi:") for f in found)


@pytest.mark.parametrize("rendering", [False, True], ids=["cluster", "rendering"])
def test_the_compiled_stack_with_metrics_passes(rendering):
    world = compliant(rendering)
    # The raw-path models (multi-node and CPU too) and the gateway.
    assert sum(m["kind"] == "ServiceMonitor" for m in world.manifests) == 6
    assert run(metrics.monitor_selects_service, world) == []


def test_the_routers_monitors_pass_though_one_also_selects_the_headless_service():
    """The router's monitor selects its Service (port metrics) and its headless Service (no such
    port): the operator scrapes the one that names the port, so that is not a violation."""
    raw = deep(STACK)
    raw["router"]["metrics"] = {"serviceMonitor": True}
    world = World(compiled_manifests(raw))
    assert {"llm-router-metrics", "llm-router-backend-router-metrics"} <= {
        m["metadata"]["name"] for m in world.manifests if m["kind"] == "ServiceMonitor"}
    assert run(metrics.monitor_selects_service, world) == []


def test_a_monitor_selecting_by_expression_is_left_alone():
    world = compliant()
    _monitor(world)["spec"]["selector"] = {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    assert run(metrics.monitor_selects_service, world) == []
