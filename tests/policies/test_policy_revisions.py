"""Two revisions side by side and a model that sleeps: controllers own only their pods; a
ScaledObject that may reach zero has the trigger that wakes it. The compiled stack with a next
revision and a sleeping model passes; one mutation each fails."""

from __future__ import annotations

import pytest

from policies.rules import revisions
from tests.support.policy_helpers import STACK, Case, check_case, compliant, deep, messages, run

# The policy world's stack with a next revision (qwen) and a model that sleeps behind the gateway.
RAW = deep(STACK)
RAW["platform"]["autoscaling"] = {"prometheusAddress": "http://prometheus-operated.monitoring.svc:9090"}
RAW["models"][1]["next"] = {"weight": 10, "source": {"repo": "Qwen/Qwen2.5-1.5B-Instruct"}}
RAW["models"].append({"name": "sleepy", "source": {"repo": "Qwen/Qwen2.5-0.5B-Instruct"}, "resources": {"memory": "8Gi"},
                      "weights": {"accessMode": "ReadWriteMany"},
                      "autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 2}})
RAW["router"] = {**RAW["router"], "gateway": {"hold": {"timeoutSeconds": 300}}}


def _deployment(world, name):
    return world.get("Deployment", name)


def _scaler(world):
    return world.get("ScaledObject", "sleepy")


def _same_labels_as_serving(world):
    # A second Deployment of qwen labelled as the first: its selector selects the serving pods too.
    labels = _deployment(world, "qwen")["spec"]["selector"]["matchLabels"]
    revision = _deployment(world, "qwen-next")
    revision["spec"]["selector"]["matchLabels"] = dict(labels)
    revision["spec"]["template"]["metadata"]["labels"].update(labels)


def _no_wake_trigger(world):
    spec = _scaler(world)["spec"]
    spec["triggers"] = [t for t in spec["triggers"] if "gateway_held_requests" not in t["metadata"]["query"]]


FAIL_CASES = [
    Case(revisions.controllers_own_their_pods, "the next revision labelled as the serving one", _same_labels_as_serving,
         "Deployment 'qwen''s selector", raw=RAW),
    Case(revisions.wakes_from_zero, "no trigger on the held requests", _no_wake_trigger,
         "ScaledObject 'sleepy' may scale to zero but no trigger reads gateway_held_requests", raw=RAW),
    Case(revisions.wakes_from_zero, "the wake trigger without its activation",
         lambda w: [t["metadata"].pop("activationThreshold", None) for t in _scaler(w)["spec"]["triggers"]],
         "at zero pods nothing would wake it", raw=RAW),
    Case(revisions.wakes_from_zero, "minReplicaCount left to KEDA's default",
         lambda w: (_scaler(w)["spec"].pop("minReplicaCount"), _no_wake_trigger(w)),
         "may scale to zero", raw=RAW),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    found = check_case(case)
    if case.rule.scope == "stack":  # a resource rule's findings get their URN from the pack
        assert all(f.urn and f.urn.startswith("urn:pulumi:") for f in found)


@pytest.mark.parametrize("rendering", [False, True], ids=["cluster", "rendering"])
@pytest.mark.parametrize("rule", [revisions.controllers_own_their_pods, revisions.wakes_from_zero], ids=lambda r: r.name)
def test_the_compiled_stack_with_two_revisions_and_a_sleeper_passes(rule, rendering):
    world = compliant(rendering, RAW)
    assert {"qwen", "qwen-next"} <= {m["metadata"]["name"] for m in world.manifests if m["kind"] == "Deployment"}
    assert any(m["kind"] == "ScaledObject" and m["spec"]["minReplicaCount"] == 0 for m in world.manifests)
    findings = run(rule, world)
    assert findings == [], messages(findings)


def test_a_scaled_object_that_keeps_a_pod_needs_no_wake_trigger():
    world = compliant(False, RAW)
    scaler = _scaler(world)
    scaler["spec"]["minReplicaCount"] = 1
    _no_wake_trigger(world)
    assert run(revisions.wakes_from_zero, world) == []

