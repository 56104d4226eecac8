"""`render` writes what `up` declares: for every shipped and fixture stack in render mode, the
Kubernetes objects the components declare under Pulumi mocks (the platform's, each model's, the
router's and the gateway's, through the one declare loop) are the objects `compile_stack` returns,
in the same order (docs/architecture.md: render and up share the plans)."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from components.compile import compile_stack
from components.compile.plan import stack_plan
from components.config import load_stack_config, read_stack_file
from components.resources.stack import declare
from tests.support.component_kit import Mocks, record_graph

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted([*ROOT.glob("stacks/Pulumi.*.yaml"), *ROOT.glob("tests/fixtures/stacks/Pulumi.*.yaml")])


@pytest.mark.parametrize("path", STACKS, ids=[p.stem.removeprefix("Pulumi.") for p in STACKS])
def test_up_in_render_mode_declares_what_render_writes(path, monkeypatch):
    raw = read_stack_file(path)
    raw["cluster"] = {**(raw.get("cluster") or {}), "renderYamlToDirectory": "build/render-test"}
    stack = load_stack_config(raw)
    graph = record_graph(monkeypatch)
    pulumi.runtime.set_mocks(Mocks(), preview=False)
    plan = stack_plan(stack)
    declare(plan, provider=None)
    assert list(graph.manifests.values()) == plan.rendered() == compile_stack(stack)


def test_the_components_declare_the_stack_plan_they_are_given(monkeypatch):
    """One plan, built once: each component holds its part of the StackPlan (not one it built
    again), in the plan's order, the router last with the gateway's plan in it."""
    stack = load_stack_config(read_stack_file(ROOT / "stacks" / "Pulumi.tour.yaml"))
    plan = stack_plan(stack)
    assert [p.name for p in plan.models] == [m.name for m in stack.models]
    assert plan.plans == (plan.platform, *plan.models, plan.router)
    assert plan.gateway is plan.router.gateway and plan.gateway.children
    record_graph(monkeypatch)
    pulumi.runtime.set_mocks(Mocks(), preview=False)
    declared = declare(plan, provider=None)
    assert declared.platform.plan is plan.platform
    assert all(declared.servers[model.name].plan is model for model in plan.models)
    assert declared.router.plan is plan.router
    assert list(declared.servers) == [m.name for m in plan.models]
