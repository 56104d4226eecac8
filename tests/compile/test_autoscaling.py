"""Autoscaling on queue depth: what a valid setting is, and what it renders.

The ScaledObject (keda.sh/v1alpha1) scales the server Deployment on vLLM's
`vllm:num_requests_waiting`; the Deployment then carries no `spec.replicas`, so `pulumi up` never
resets the count the autoscaler chose. A model without autoscaling renders as before (the golden
files hold no autoscaled model, and their test stays green).
"""

from __future__ import annotations

import pytest
import yaml

from components.compile import autoscaling as compile_autoscaling
from components.compile.plan import compile_stack
from components.compile.stack import compile_model
from components.config import ConfigError, load_stack_config
from components.config.autoscaling import KEDA_CRD
from components.config.model import replica_ceiling
from tests.support import builders
from tests.support.builders import model, nim_model
from tests.support.real_crds import operator_crd

RWX = {"accessMode": "ReadWriteMany"}
SCALED = {"enabled": True, "maxReplicas": 4}
# KEDA 2.16.1's own CRD (the operators cache; see tests/real_crds.py).
KEDA_CRD_FIXTURE = operator_crd("keda", "keda.sh_scaledobjects.yaml")


def scaled(name: str = "m", **fields) -> dict:
    return model(name, weights=RWX, autoscaling={**SCALED, **fields.pop("autoscaling", {})}, **fields)


# Autoscaling reads a queue depth Prometheus has only once it scrapes the model: the stacks here
# turn platform.metrics on, as an autoscaled stack must (test_autoscaling_needs_the_models_scraped).
METRICS = {"metrics": {"enabled": True}}


def stack(*models: dict, **platform):
    return builders.stack(*models, **{**METRICS, **platform})


def compiled(raw_model: dict, **platform):
    return builders.compiled(raw_model, **{**METRICS, **platform})


def problems_of(raw_model: dict, **platform) -> list[str]:
    raw: dict = {"models": [raw_model], "platform": {**METRICS, **platform}}
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    return caught.value.problems


BAD = [
    ("min-above-max", scaled(autoscaling={"minReplicas": 5}), "models.0.autoscaling.minReplicas", "exceeds maxReplicas (4)"),
    ("min-equals-max", scaled(autoscaling={"minReplicas": 4}), "models.0.autoscaling.maxReplicas", "nothing to scale"),
    ("no-max", model("m", weights=RWX, autoscaling={"enabled": True}), "models.0.autoscaling.maxReplicas",
     "set the most replicas"),
    ("sleep-without-a-gateway", scaled(autoscaling={"minReplicas": 0}), "models.0.autoscaling.minReplicas",
     "no gateway fronts it; add llm-serving:router with its gateway, or set minReplicas: 1"),
    ("negative-min", scaled(autoscaling={"minReplicas": -1}), "models.0.autoscaling.minReplicas",
     "greater than or equal to 0"),
    ("idle-without-sleep", scaled(autoscaling={"idleSeconds": 600}), "models.0.autoscaling.idleSeconds",
     "applies to minReplicas: 0 only"),
    ("idle-too-short", scaled(autoscaling={"minReplicas": 0, "idleSeconds": 10}), "models.0.autoscaling.idleSeconds",
     "greater than or equal to 60"),
    ("read-write-once", model("m", autoscaling=SCALED), "models.0.weights.accessMode",
     "set weights.accessMode: ReadWriteMany"),
    ("replicas-too", scaled(replicas=2), "models.0.replicas", "remove replicas"),
    ("replicas-one-too", scaled(replicas=1), "models.0.replicas", "remove replicas"),
    ("nim-operator", nim_model(path="operator", weights=RWX, autoscaling=SCALED, nim={"authSecret": "ngc"}),
     "models.0.autoscaling.enabled", "a KEDA ScaledObject cannot target a NIMService"),
    ("nim-raw", nim_model(weights=RWX, autoscaling=SCALED), "models.0.autoscaling.enabled",
     "no documented model label"),
    ("zero-target", scaled(autoscaling={"targetQueueDepth": 0}), "models.0.autoscaling.targetQueueDepth",
     "greater than or equal to 1"),
    ("stabilization-over-an-hour", scaled(autoscaling={"scaleDownStabilizationSeconds": 3601}),
     "models.0.autoscaling.scaleDownStabilizationSeconds", "less than or equal to 3600"),
]


@pytest.mark.parametrize("raw, path, fragment", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_bad_setting_is_refused_at_its_field_with_the_fix(raw: dict, path: str, fragment: str) -> None:
    problems = problems_of(raw)
    assert any(p.startswith(path + ":") and fragment in p for p in problems), problems


@pytest.mark.parametrize("address", ["http://localhost:9090", "http://127.0.0.1:9090", "prometheus:9090"])
def test_the_prometheus_address_must_be_reachable_from_the_cluster(address: str) -> None:
    problems = problems_of(scaled(), autoscaling={"prometheusAddress": address})
    assert any(p.startswith("platform.autoscaling.prometheusAddress:") and "from inside the cluster" in p
               for p in problems), problems


def test_settings_of_a_disabled_autoscaler_are_kept_but_change_nothing() -> None:
    off = model("m", replicas=1, autoscaling={"enabled": False, "maxReplicas": 3})
    manifests = compiled(off)
    assert manifests.deployment["spec"]["replicas"] == 1 and manifests.scaled_object is None


def test_replica_ceiling_answers_may_this_model_run_several_replicas() -> None:
    (fixed_one, fixed_two, autoscaled) = stack(
        model("a"), model("b", replicas=2, weights=RWX), scaled("c")).models
    assert [replica_ceiling(m) for m in (fixed_one, fixed_two, autoscaled)] == [1, 2, 4]


# --- render ---------------------------------------------------------------------------------

def test_an_autoscaled_deployment_carries_no_replica_count() -> None:
    spec = compiled(scaled()).deployment["spec"]
    assert "replicas" not in spec
    # Everything else of the Deployment is as with a fixed count of several replicas (the budget
    # and the spread follow maxReplicas).
    fixed = compiled(model("m", weights=RWX, replicas=SCALED["maxReplicas"])).deployment["spec"]
    assert {k: v for k, v in fixed.items() if k != "replicas"} == spec


def test_the_scaled_object_targets_the_server_deployment_on_the_models_queue() -> None:
    manifests = compiled(scaled(autoscaling={"minReplicas": 2, "targetQueueDepth": 8,
                                             "scaleDownStabilizationSeconds": 900}),
                         autoscaling={"prometheusAddress": "http://prom.obs.svc:9090", "pollingIntervalSeconds": 15})
    scaler = manifests.scaled_object
    assert (scaler["apiVersion"], scaler["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert scaler["metadata"]["namespace"] == manifests.deployment["metadata"]["namespace"]
    spec = scaler["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                      "name": manifests.deployment["metadata"]["name"]}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["pollingInterval"]) == (2, 4, 15)
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == {
        "scaleDown": {"stabilizationWindowSeconds": 900}}
    (trigger,) = spec["triggers"]
    assert (trigger["type"], trigger["metricType"]) == ("prometheus", "AverageValue")
    assert trigger["metadata"] == {
        "serverAddress": "http://prom.obs.svc:9090",
        # vLLM labels the gauge with the served model name, which is the model's name.
        "query": 'sum(vllm:num_requests_waiting{namespace="llm-serving",model_name="m"})',
        "threshold": "8",
        "ignoreNullValues": "false",
    }
    # KEDA's trigger metadata is a map of strings (the CRD says so): no number may slip in.
    assert all(isinstance(v, str) for v in trigger["metadata"].values())


def test_the_query_names_the_served_model() -> None:
    manifests = compiled(scaled("qwen-small"))
    served = manifests.deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert served[served.index("--served-model-name") + 1] == "qwen-small"
    assert 'model_name="qwen-small"' in manifests.scaled_object["spec"]["triggers"][0]["metadata"]["query"]


def test_an_unscaled_stack_renders_no_scaled_object_and_keeps_its_replicas() -> None:
    manifests = compile_stack(stack(model("a", replicas=2, weights=RWX), model("b")))
    assert "ScaledObject" not in {m["kind"] for m in manifests}
    assert [m["spec"]["replicas"] for m in manifests if m["kind"] == "Deployment"] == [2, 1]


def test_the_scaled_object_comes_after_the_deployment_it_scales() -> None:
    kinds = [m["kind"] for m in compile_stack(stack(scaled()))]
    assert kinds.index("ScaledObject") > kinds.index("Deployment")


def test_the_crd_requirement_names_the_setting_and_the_fix() -> None:
    (requirement,) = compile_autoscaling.required_crds(stack(scaled()).models[0])
    assert requirement["crds"] == [KEDA_CRD] and requirement["version"] == "v1alpha1"
    assert requirement["field"] == "autoscaling.enabled"
    assert "helm install keda" in requirement["fix"] and "autoscaling.enabled: false" in requirement["fix"]
    assert compile_autoscaling.required_crds(stack(model("m")).models[0]) == []


def _undeclared(value, schema: dict, path: str) -> list[str]:
    """Paths in ``value`` the CRD schema does not declare (what the API server refuses under
    server-side apply), or whose type it does not allow."""
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        found = []
        props, extra = schema.get("properties"), schema.get("additionalProperties")
        for key, item in value.items():
            if props is not None and key in props:
                found += _undeclared(item, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += _undeclared(item, extra, f"{path}.{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and props is not None:
                found.append(f"{path}.{key}: not declared")
        return found + [f"{path}.{r}: required" for r in schema.get("required", ()) if r not in value]
    if kind == "array":
        return [p for i, item in enumerate(value) for p in _undeclared(item, schema["items"], f"{path}[{i}]")]
    expected = {"string": str, "integer": int, "boolean": bool}.get(kind)
    if expected and (not isinstance(value, expected) or (expected is int and isinstance(value, bool))):
        return [f"{path}: {value!r} is not {kind}"]
    low, high = schema.get("minimum"), schema.get("maximum")
    if (low is not None and value < low) or (high is not None and value > high):
        return [f"{path}: {value} outside [{low}, {high}]"]
    return []


def test_every_field_the_scaled_object_writes_is_declared_by_kedas_crd() -> None:
    crd = yaml.safe_load(KEDA_CRD_FIXTURE.read_text())
    (version,) = crd["spec"]["versions"]
    assert f"{crd['spec']['group']}/{version['name']}" == compile_autoscaling.KEDA_API_VERSION
    schema = version["schema"]["openAPIV3Schema"]
    scaler = compiled(scaled(autoscaling={"scaleDownStabilizationSeconds": 3600})).scaled_object
    assert _undeclared({k: v for k, v in scaler.items() if k != "metadata"}, schema, "") == []


def test_the_schema_walk_catches_an_undeclared_field_and_a_wrong_type() -> None:
    crd = yaml.safe_load(KEDA_CRD_FIXTURE.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    scaler = compiled(scaled()).scaled_object
    scaler["spec"]["cooldown"] = 30
    scaler["spec"]["triggers"][0]["metadata"]["threshold"] = 5
    assert _undeclared(scaler["spec"], schema["properties"]["spec"], "spec") == [
        "spec.triggers[0].metadata.threshold: 5 is not string", "spec.cooldown: not declared"]


def test_autoscaling_needs_the_models_scraped() -> None:
    problems = problems_of(scaled(), metrics={"enabled": False})
    assert problems == ["models.0.autoscaling.enabled: model 'm' scales on vllm:num_requests_waiting, which "
                        "Prometheus only has once it scrapes the model; set platform.metrics.enabled: true (a "
                        "ServiceMonitor per model), or, when your Prometheus scrapes the model pods another way, "
                        "platform.autoscaling.requireModelMetrics: false"]
    # The opt-out: a Prometheus that scrapes the pods by other means.
    assert stack(scaled(), metrics={"enabled": False}, autoscaling={"requireModelMetrics": False}).models[0].autoscaling.enabled


# --- minReplicas: 0 (the model sleeps when idle; the gateway holds what wakes it) ------------------

HOLD = {"gateway": {"hold": {"timeoutSeconds": 300}}}
ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
SLEEPY = {"minReplicas": 0, "idleSeconds": 600}


def sleepy_stack(router: dict | None = None, **fields):
    raw = {"models": [scaled(autoscaling=SLEEPY, **fields), model("other")], "platform": METRICS,
           "router": {"image": ROUTER_IMAGE, **(HOLD if router is None else router)}}
    return load_stack_config(raw)


def sleepy_problems(router: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        sleepy_stack(router)
    return caught.value.problems


@pytest.mark.parametrize("router, fix", [
    ({"models": ["other"], **HOLD}, "add 'm' to router.models, or set minReplicas: 1"),
    ({"gateway": {"enabled": False}}, "router.gateway is disabled; enable it, or set minReplicas: 1"),
    ({"gateway": {"models": ["other"], "hold": {"timeoutSeconds": 300}}},
     "router.gateway.models leaves it out; add it there, or set minReplicas: 1"),
    ({"gateway": {}}, "router.gateway.hold.timeoutSeconds is 0"),
], ids=["not-fronted", "gateway-off", "gateway-leaves-it-out", "nothing-held"])
def test_a_model_that_may_sleep_needs_a_gateway_that_holds_its_requests(router: dict, fix: str) -> None:
    (problem,) = sleepy_problems(router)
    assert problem.startswith("models.0.autoscaling.minReplicas: at zero replicas, model 'm' wakes on the "
                              "requests the gateway holds for it") and fix in problem


def test_a_sleeping_model_is_woken_by_held_requests_and_kept_awake_by_its_traffic() -> None:
    config = sleepy_stack()
    scaler = compile_model(config.models[0], config).scaled_object
    spec = scaler["spec"]
    assert spec["minReplicaCount"] == 0 and spec["cooldownPeriod"] == 600
    queue, held, activity = spec["triggers"]
    assert queue["metadata"]["query"] == compile_autoscaling.queue_query(config.models[0], config)
    assert "activationThreshold" not in queue["metadata"]
    assert held["metadata"] == {
        "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
        "query": 'sum(gateway_held_requests{namespace="llm-serving",model="m"})',
        "threshold": "5", "activationThreshold": "0", "ignoreNullValues": "false"}
    assert activity["metadata"]["query"] == (
        '(sum(increase(gateway_requests_total{namespace="llm-serving",model="m"}[2m])) or vector(0)) + '
        '(sum(vllm:num_requests_running{namespace="llm-serving",model_name="m"}) or vector(0))')
    assert activity["metadata"]["activationThreshold"] == "0"
    assert activity["metadata"]["threshold"] == compile_autoscaling.ACTIVITY_ONLY_THRESHOLD
    crd = yaml.safe_load(KEDA_CRD_FIXTURE.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _undeclared({k: v for k, v in scaler.items() if k != "metadata"}, schema, "") == []


def test_a_model_that_never_sleeps_has_no_cooldown_and_one_trigger() -> None:
    spec = compiled(scaled()).scaled_object["spec"]
    assert "cooldownPeriod" not in spec and len(spec["triggers"]) == 1


def test_the_wake_metrics_are_the_ones_the_gateway_writes() -> None:
    """The triggers read the gateway's counters by name: renaming one in its metrics module must fail here."""
    from components.compile.gateway.nginx import script

    text = script("metrics.js")
    assert f"'{compile_autoscaling.REQUESTS_METRIC}'" in text
    assert f"'# TYPE {compile_autoscaling.HELD_METRIC} gauge'" in text
    assert f"'{compile_autoscaling.HELD_METRIC}{{model=\"'" in text
