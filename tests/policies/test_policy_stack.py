"""Weight gating: every serving Deployment depends on its model's WeightsGate (or, rendering
YAML, on its puller Job), read from the engine's dependency graph."""

from __future__ import annotations

import pytest

from policies.rules import stack
from policies.rules.base import violations
from policies.rules.kube import UNKNOWN, StackResource
from tests.support.policy_helpers import GATE_TYPE, Case, check_case, compliant, messages, run


def _drop_label(world, model, key):
    for labels in (world.server(model)["metadata"]["labels"], world.server(model)["spec"]["template"]["metadata"]["labels"]):
        labels.pop(key)


FAIL_CASES = [
    Case(stack.server_weights_gate, "server waits on the Job, not the gate",
         lambda w: (w.removed_edges.add(("qwen-server", "qwen-weights-gate")),
                    w.added_edges.add(("qwen-server", "qwen-puller"))),
         "Deployment 'qwen' does not depend on WeightsGate 'qwen-weights-gate'"),
    Case(stack.server_weights_gate, "no dependencies at all",
         lambda w: w.removed_edges.add(("llama-server", "llama-weights-gate")),
         "Deployment 'llama' does not depend on WeightsGate"),
    Case(stack.server_weights_gate, "a multi-node model's LeaderWorkerSet without its gate",
         lambda w: w.removed_edges.add(("llama-405b-server", "llama-405b-weights-gate")),
         "LeaderWorkerSet 'llama-405b-lws' does not depend on WeightsGate 'llama-405b-weights-gate'"),
    Case(stack.server_weights_gate, "gate missing from a cluster stack",
         lambda w: w.removed.add("nim-llama-weights-gate"),
         "the stack has no WeightsGate for model 'nim-llama' ('nim-llama-weights-gate')"),
    Case(stack.server_weights_gate, "another model's gate does not count",
         lambda w: (w.removed_edges.add(("qwen-server", "qwen-weights-gate")),
                    w.added_edges.add(("qwen-server", "llama-weights-gate"))),
         "Deployment 'qwen' does not depend on WeightsGate 'qwen-weights-gate'"),
    Case(stack.server_weights_gate, "server without model label",
         lambda w: _drop_label(w, "qwen", "llm-serving.dev/model"), "has no llm-serving.dev/model label"),
    Case(stack.server_weights_gate, "rendering: server does not wait on the puller",
         lambda w: w.removed_edges.add(("qwen-server", "qwen-puller")),
         "(rendering mode) does not depend on its model's puller Job", rendering=True),
    Case(stack.server_weights_gate, "rendering: no puller Job",
         lambda w: w.removed.add("qwen-puller"), "the stack has no puller Job for model 'qwen'", rendering=True),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    found = check_case(case)
    assert all(f.urn and f.urn.startswith("urn:pulumi:") for f in found)  # reported on the Deployment


@pytest.mark.parametrize("rendering", [False, True], ids=["cluster", "rendering"])
def test_compiled_stack_passes(rendering):
    assert run(stack.server_weights_gate, compliant(rendering)) == []


def test_transitive_dependency_through_another_resource_counts():
    world = compliant()
    world.removed_edges.add(("qwen-server", "qwen-weights-gate"))
    world.added_edges.update({("qwen-server", "platform-namespace"), ("platform-namespace", "qwen-weights-gate")})
    assert run(stack.server_weights_gate, world) == []


def test_gate_found_by_name_when_model_input_is_absent():
    world = compliant()
    graph = world.stack()
    resources = tuple(
        StackResource(r.type, r.name, r.urn, {}, r.dependencies, r.provider_props) if r.type == GATE_TYPE else r
        for r in graph.resources
    )
    assert stack.server_weights_gate(type(graph)(resources)) == []


def test_unknown_provider_mode_is_reported_not_guessed():
    world = compliant()
    world.removed.add("qwen-weights-gate")
    graph = world.stack()
    resources = tuple(
        StackResource(r.type, r.name, r.urn, r.props, r.dependencies, {"renderYamlToDirectory": UNKNOWN})
        if r.name == "qwen-server" else r for r in graph.resources
    )
    found = stack.server_weights_gate(type(graph)(resources))
    assert not violations(found)
    assert "cannot be checked until apply" in messages(found)


def test_gate_type_is_pack_config():
    world = compliant()
    found = violations(run(stack.server_weights_gate, world, {"gateType": "pulumi-python:dynamic/other:Gate"}))
    assert len(found) == 5 and "has no WeightsGate" in found[0].message  # llama, llama-405b, qwen, qwen-cpu, nim-llama
