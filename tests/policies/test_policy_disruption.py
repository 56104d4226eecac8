"""Disruption rules: a server's grace period outlasts its preStop wait, a multi-replica server
spreads over nodes and has a PodDisruptionBudget, and no budget forbids every eviction. The
compliant world's `llama` model runs two replicas (budget and spread); `qwen` runs one."""

from __future__ import annotations

import pytest

from policies.rules import disruption
from policies.rules.base import violations
from policies.rules.kube import UNKNOWN
from tests.support.policy_helpers import Case, check_case, compliant, container, pod, run


def _budget(world, model="llama"):
    (found,) = [m for m in world.manifests if m["kind"] == "PodDisruptionBudget"
                and m["metadata"]["labels"].get("llm-serving.dev/model") == model]
    return found


def _spread(world):
    return pod(world.server("llama"))["topologySpreadConstraints"]


FAIL_CASES = [
    Case(disruption.drain_grace, "grace period equal to the preStop wait",
         lambda w: pod(w.server("qwen")).update(terminationGracePeriodSeconds=120),
         "waits 120 s in preStop but the pod gets 120 s to stop; set "
         "spec.template.spec.terminationGracePeriodSeconds to at least 135"),
    Case(disruption.drain_grace, "grace period left at the Kubernetes default",
         lambda w: pod(w.server("llama")).pop("terminationGracePeriodSeconds"), "gets 30 s to stop"),
    Case(disruption.drain_grace, "a longer wait on one container only",
         lambda w: container(w.server("qwen"))["lifecycle"]["preStop"]["sleep"].update(seconds=600),
         "waits 600 s in preStop"),
    Case(disruption.topology_spread, "two replicas, no spread",
         lambda w: pod(w.server("llama")).pop("topologySpreadConstraints"),
         "Deployment 'llama' runs 2 replicas but does not spread them over nodes"),
    Case(disruption.topology_spread, "spread over zones only",
         lambda w: _spread(w)[0].update(topologyKey="topology.kubernetes.io/zone"), "does not spread them"),
    Case(disruption.topology_spread, "spread over another model's pods",
         lambda w: _spread(w)[0]["labelSelector"]["matchLabels"].update({"app.kubernetes.io/name": "qwen"}),
         "does not spread them"),
    Case(disruption.topology_spread, "a single replica scaled to three without a spread",
         lambda w: w.server("qwen")["spec"].update(replicas=3), "Deployment 'qwen' runs 3 replicas"),
    Case(disruption.topology_spread, "autoscaled (no spec.replicas), no spread",
         lambda w: [w.server("llama")["spec"].pop("replicas"), pod(w.server("llama")).pop("topologySpreadConstraints")],
         "Deployment 'llama' runs a replica count left to an autoscaler but does not spread them over nodes"),
    Case(disruption.disruption_budget, "autoscaled (no spec.replicas), no budget",
         lambda w: [w.server("llama")["spec"].pop("replicas"), w.remove(_budget(w))],
         "Deployment 'llama' runs a replica count left to an autoscaler but no PodDisruptionBudget"),
    Case(disruption.disruption_budget, "two replicas, no budget",
         lambda w: w.remove(_budget(w)),
         "Deployment 'llama' runs 2 replicas but no PodDisruptionBudget in namespace 'llm-serving' selects its pods"),
    Case(disruption.disruption_budget, "budget selects another model's pods",
         lambda w: _budget(w)["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/name": "qwen"}),
         "Deployment 'llama' runs 2 replicas but no PodDisruptionBudget"),
    Case(disruption.disruption_budget, "budget in another namespace",
         lambda w: _budget(w)["metadata"].update(namespace="elsewhere"), "no PodDisruptionBudget"),
    Case(disruption.disruption_budget, "minAvailable equal to the replicas",
         lambda w: _budget(w)["spec"].update({"maxUnavailable": None, "minAvailable": 2}),
         "allows no eviction of Deployment 'llama''s 2 pod(s)"),
    Case(disruption.disruption_budget, "maxUnavailable 0",
         lambda w: _budget(w)["spec"].update(maxUnavailable=0), "allows no eviction"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


@pytest.mark.parametrize("rule", [disruption.drain_grace, disruption.topology_spread, disruption.disruption_budget],
                         ids=lambda r: r.name)
def test_compiled_stack_passes(rule):
    assert run(rule, compliant()) == []


def test_an_autoscaled_server_with_its_budget_and_spread_passes():
    world = compliant()
    world.server("llama")["spec"].pop("replicas")
    assert run(disruption.topology_spread, world) == [] and run(disruption.disruption_budget, world) == []


def test_a_single_replica_with_minavailable_one_blocks_drains():
    # The trap the compiler avoids: a budget of minAvailable 1 over one pod never lets it go.
    world = compliant()
    budget = _budget(world)
    budget["spec"] = {"minAvailable": 1, "selector": {"matchLabels": dict(
        world.server("qwen")["spec"]["selector"]["matchLabels"])}}
    budget["metadata"]["labels"]["llm-serving.dev/model"] = "qwen"
    found = violations(run(disruption.disruption_budget, world))
    assert any("allows no eviction of Deployment 'qwen''s 1 pod(s)" in f.message for f in found), found


def test_a_server_without_a_wait_or_with_zero_drain_passes():
    world = compliant()
    for name in ("qwen", "llama"):
        for c in pod(world.server(name))["containers"]:
            c.pop("lifecycle", None)
        pod(world.server(name))["terminationGracePeriodSeconds"] = 15
    assert run(disruption.drain_grace, world) == []


def test_unknowns_are_unchecked_not_violations():
    world = compliant()
    pod(world.server("llama"))["terminationGracePeriodSeconds"] = UNKNOWN
    world.server("qwen")["spec"]["replicas"] = UNKNOWN
    _budget(world)["spec"]["selector"] = UNKNOWN
    for rule in (disruption.drain_grace, disruption.topology_spread, disruption.disruption_budget):
        findings = run(rule, world)
        assert findings and not violations(findings), (rule.name, findings)


def test_other_components_are_not_checked():
    world = compliant()
    router = world.one("Deployment", "router")
    pod(router).pop("topologySpreadConstraints", None)
    router["spec"]["replicas"] = 5
    assert run(disruption.topology_spread, world) == []
