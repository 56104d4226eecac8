"""Disruption and drain of model servers (issue 16, item 3): the config (platform default, per-model
override, validation at the field path with the fix) and what the compilers render from it
(PodDisruptionBudget, preStop wait, grace period, topology spread) on the raw and operator paths."""

from __future__ import annotations

import pytest

from components.compile import compile_stack, disruption, network
from components.compile.plan import model_plan
from components.compile.stack import compile_model
from components.config import ConfigError, load_stack_config
from components.config.disruption import DEFAULT_DRAIN_SECONDS, GRACE_MARGIN_SECONDS
from tests.support.builders import compiled, container, model, nim_model, pod_spec, stack
from tests.support.kube_schema import assert_valid_kubernetes

SHARED = {"accessMode": "ReadWriteMany"}


def duo(name: str = "duo", **fields) -> dict:
    return model(name, replicas=2, weights=SHARED, **fields)


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    return caught.value.problems


# --- config ------------------------------------------------------------------------------------

def test_defaults_and_their_grace():
    policy = stack(model("a")).models[0].disruption_policy(stack(model("a")).platform.disruption)
    assert (policy.drain_seconds, policy.topology_spread) == (DEFAULT_DRAIN_SECONDS, "node") == (120, "node")
    assert policy.grace_seconds == DEFAULT_DRAIN_SECONDS + GRACE_MARGIN_SECONDS == 135


def test_a_model_overrides_only_the_keys_it_sets():
    config = load_stack_config({"platform": {"disruption": {"drainSeconds": 300, "topologySpread": "node-and-zone"}},
                                "models": [model("a", disruption={"drainSeconds": 30}), model("b")]})
    a, b = (m.disruption_policy(config.platform.disruption) for m in config.models)
    assert (a.drain_seconds, a.topology_spread) == (30, "node-and-zone")
    assert (b.drain_seconds, b.topology_spread) == (300, "node-and-zone")


@pytest.mark.parametrize("raw, path, fragment", [
    ({"platform": {"disruption": {"drainSeconds": 7200}}, "models": [model()]},
     "platform.disruption.drainSeconds", "outside 0..3600 seconds; set the longest answer's generation time"),
    ({"models": [model(disruption={"drainSeconds": -1})]}, "models.0.disruption.drainSeconds", "or 0 to stop at once"),
    ({"models": [model(disruption={"topologySpread": "zone"})]}, "models.0.disruption.topologySpread", "node-and-zone"),
    ({"models": [model(disruption={"drain": 30})]}, "models.0.disruption.drain", ""),
    ({"models": [model(disruption={"drainSeconds": "60"})]}, "models.0.disruption.drainSeconds", ""),
], ids=["platform-too-long", "model-negative", "unknown-spread", "unknown-key", "string-seconds"])
def test_bad_values_are_reported_at_their_field(raw, path, fragment):
    at_path = [p for p in problems_of(raw) if p.startswith(f"{path}: ")]
    assert at_path and any(fragment in p for p in at_path), at_path


# --- raw path --------------------------------------------------------------------------------

def test_one_replica_gets_the_drain_but_no_budget_and_no_spread():
    manifests = compiled(model("solo"))
    spec = pod_spec(manifests.deployment)
    assert container(manifests.deployment, "server")["lifecycle"] == {"preStop": {"sleep": {"seconds": 120}}}
    assert spec["terminationGracePeriodSeconds"] == 135
    # A budget over one pod could only ever block a node drain; no spread to prefer either.
    assert manifests.pod_disruption_budget is None
    assert "topologySpreadConstraints" not in spec


def test_two_replicas_get_a_budget_of_one_over_exactly_the_server_pods():
    config = stack(duo())
    manifests = compile_model(config.models[0], config)
    pdb, deployment = manifests.pod_disruption_budget, manifests.deployment
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert pdb["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    # Not the puller's pods: its template labels do not match the budget's selector.
    puller_labels = manifests.puller_job["spec"]["template"]["metadata"]["labels"]
    assert not all(puller_labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    # Declared after the server and its Service.
    assert model_plan(config.models[0], config).objects[-1] == pdb


def test_two_replicas_prefer_one_pod_per_node_and_never_wait_for_it():
    deployment = compiled(duo()).deployment
    (spread,) = pod_spec(deployment)["topologySpreadConstraints"]
    assert spread == {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                      "labelSelector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}}


def test_spread_policy_zone_and_off():
    zone = pod_spec(compiled(duo(disruption={"topologySpread": "node-and-zone"})).deployment)
    assert [c["topologyKey"] for c in zone["topologySpreadConstraints"]] == [
        "kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    assert {c["whenUnsatisfiable"] for c in zone["topologySpreadConstraints"]} == {"ScheduleAnyway"}
    off = compiled(duo(), disruption={"topologySpread": "off"})
    assert "topologySpreadConstraints" not in pod_spec(off.deployment)
    assert off.pod_disruption_budget is not None  # the budget does not depend on the spread


def test_zero_drain_stops_at_once_with_the_margin_only():
    manifests = compiled(model("fast", disruption={"drainSeconds": 0}))
    assert "lifecycle" not in container(manifests.deployment, "server")
    assert pod_spec(manifests.deployment)["terminationGracePeriodSeconds"] == GRACE_MARGIN_SECONDS


def test_the_multi_pod_predicate_is_the_one_function(monkeypatch):
    # Autoscaling extends may_run_several; budget and spread must both follow it.
    monkeypatch.setattr(disruption, "may_run_several", lambda m: True)
    manifests = compiled(model("solo"))
    assert manifests.pod_disruption_budget is not None
    assert "topologySpreadConstraints" in pod_spec(manifests.deployment)


def test_a_fronted_pod_drains_engine_and_pylon_alike():
    config = load_stack_config({
        "models": [duo("alpha", disruption={"drainSeconds": 200})],
        "router": {"image": "nvcr.io/nvidia/llm-request-router:0.16.2",
                   "pylon": {"image": "nvcr.io/example/stargate-client:0.4.0"}, "workerAuth": {"mode": "open"}},
    })
    (deployment,) = [m for m in compile_stack(config) if m["kind"] == "Deployment" and m["metadata"]["name"] == "alpha"]
    waits = {c["name"]: c["lifecycle"]["preStop"] for c in pod_spec(deployment)["containers"]}
    assert waits == {"server": {"sleep": {"seconds": 200}}, "pylon": {"sleep": {"seconds": 200}}}
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] == 215
    assert_valid_kubernetes(deployment)


def test_rendered_objects_are_strictly_valid():
    manifests = compiled(duo(disruption={"topologySpread": "node-and-zone"}))
    for manifest in (manifests.deployment, manifests.pod_disruption_budget):
        assert_valid_kubernetes(manifest)


# --- operator path ---------------------------------------------------------------------------

def operator_model(**fields) -> dict:
    return nim_model("op", path="operator", nim={"authSecret": "ngc-api"}, **fields)


def test_operator_path_budget_selects_the_labels_the_nimservice_puts_on_its_pods():
    config = stack(operator_model(replicas=2, weights=SHARED))
    objects = compile_stack(config)
    (pdb,) = [m for m in objects if m["kind"] == "PodDisruptionBudget"]
    (service,) = [m for m in objects if m["kind"] == "NIMService"]
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert selector == network.server_pods(config.models[0])
    assert all(service["spec"]["labels"].get(k) == v for k, v in selector.items())
    assert pdb["spec"]["maxUnavailable"] == 1
    assert_valid_kubernetes(pdb)
    # No lifecycle or grace field exists in NIMService: nothing of the drain is rendered.
    assert not {"lifecycle", "terminationGracePeriodSeconds", "topologySpreadConstraints"} & set(service["spec"])
    # The spread, as the preferred anti-affinity NIMService's core/v1 affinity can carry.
    (term,) = service["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                       "labelSelector": {"matchLabels": selector}}}


def test_operator_path_zone_spread_and_off():
    zone = [m for m in compile_stack(stack(operator_model(replicas=2, weights=SHARED,
                                                          disruption={"topologySpread": "node-and-zone"})))
            if m["kind"] == "NIMService"][0]["spec"]["affinity"]["podAntiAffinity"]
    terms = zone["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [(t["podAffinityTerm"]["topologyKey"], t["weight"]) for t in terms] == [
        ("kubernetes.io/hostname", 100), ("topology.kubernetes.io/zone", 50)]
    off = [m for m in compile_stack(stack(operator_model(replicas=2, weights=SHARED,
                                                         disruption={"topologySpread": "off"})))
           if m["kind"] == "NIMService"][0]
    assert "affinity" not in off["spec"]


def test_operator_path_single_replica_has_no_budget_and_no_spread():
    objects = compile_stack(stack(operator_model()))
    assert not [m for m in objects if m["kind"] == "PodDisruptionBudget"]
    assert "affinity" not in [m for m in objects if m["kind"] == "NIMService"][0]["spec"]
