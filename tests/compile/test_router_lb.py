"""router.loadBalancer: typed settings in, Stargate's lb-config.json (ConfigMap + flag) out."""

from __future__ import annotations

import json

import pytest

from components.compile.plan import router_plan
from components.compile.router import compile_router
from components.config import ConfigError, load_stack_config
from tests.support.builders import model

IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
PULSAR = {"algorithm": "pulsar", "seed": "chat-v1", "requireCacheAffinityKey": True}


def stack_of(lb=None, models=("chat",), **router):
    section = {"image": IMAGE, **router}
    if lb is not None:
        section["loadBalancer"] = lb
    return load_stack_config({"models": [model(m) for m in models], "router": section})


def render(lb=None, models=("chat",), **router):
    return compile_router(stack_of(lb, models, **router))


def router_container(manifests) -> dict:
    return manifests.workload["spec"]["template"]["spec"]["containers"][0]


def test_unset_renders_no_file_and_no_flag():
    manifests = render()
    assert manifests.lb_config is None
    assert not [a for a in router_container(manifests)["args"] if a.startswith("--lb-config-path")]
    assert "annotations" not in manifests.workload["spec"]["template"]["metadata"]


def test_the_file_is_the_documented_schema_mounted_where_the_flag_points():
    manifests = render({"models": {"chat": PULSAR}, "requestAlgorithms": {"round-robin": "round-robin"}})
    config = json.loads(manifests.lb_config["data"]["lb-config.json"])
    assert config == {"default": "power-of-n", "request_algorithms": {"round-robin": "round-robin"},
                      "models": {"chat": {"algorithm": "pulsar", "seed": "chat-v1",
                                          "require_cache_affinity_key": True}}}
    container = router_container(manifests)
    assert "--lb-config-path=/etc/stargate/lb/lb-config.json" in container["args"]
    assert {"name": "lb-config", "mountPath": "/etc/stargate/lb", "readOnly": True} in container["volumeMounts"]
    volume = {"name": "lb-config", "configMap": {"name": "llm-router-lb-config", "defaultMode": 0o444}}
    assert volume in manifests.workload["spec"]["template"]["spec"]["volumes"]
    # The plan's order: the file before the pods that read it.
    order = router_plan(stack_of({"models": {"chat": PULSAR}, "requestAlgorithms": {"round-robin": "round-robin"}})).objects
    assert order.index(manifests.lb_config) < order.index(manifests.workload)


def test_a_changed_file_rolls_the_router_pods():
    # Stargate reads the file once at startup.
    def annotation(lb):
        return render(lb).workload["spec"]["template"]["metadata"]["annotations"]["llm-serving.dev/lb-config-sha256"]

    assert annotation({"models": {"chat": PULSAR}}) != annotation({"models": {"chat": "round-robin"}})


def test_only_set_fields_are_written():
    manifests = render({"default": "wait-and-widen",
                        "models": {"chat": {"algorithm": "power-of-n", "sampleCount": 4, "comparator": "num-requests-queued"}}})
    config = json.loads(manifests.lb_config["data"]["lb-config.json"])
    assert config["models"]["chat"] == {"algorithm": "power-of-n", "sample_count": 4, "comparator": "num-requests-queued"}


@pytest.mark.parametrize("lb, path, words", [
    ({"models": {"chat": {"algorithm": "pulsar", "sampleCount": 2}}}, "loadBalancer.models.chat", "not a setting of pulsar"),
    ({"models": {"chat": {"algorithm": "pulsar-wait-and-widen", "comparator": "ttft"}}}, "comparator", "not a setting"),
    ({"models": {"chat": {"algorithm": "wait-and-widen", "maxQueueTimeFloorMs": 5}}}, "maxQueueTimeFloorMs", "set both"),
    ({"models": {"chat": {"algorithm": "wait-and-widen", "maxQueueTimeFloorMs": 9, "maxQueueTimeCeilMs": 5}}},
     "maxQueueTimeFloorMs", "lower the floor"),
    ({"models": {"chat": {"algorithm": "power-of-n", "sampleCount": 65}}}, "sampleCount", "64"),
    ({"models": {"chat": "hash"}}, "loadBalancer.models.chat", "pulsar"),
    ({"requestAlgorithms": {"pulsar": "random"}}, "requestAlgorithms.pulsar", "must be the algorithm"),
    ({"models": {"other": "pulsar"}}, "router.loadBalancer.models.other", "not a model the router fronts"),
])
def test_refused_settings_name_the_field_and_the_fix(lb, path, words):
    with pytest.raises(ConfigError) as error:
        render(lb)
    assert path in str(error.value) and words in str(error.value)


def test_the_flag_in_args_clashes_with_the_setting():
    with pytest.raises(ConfigError) as error:
        render({"models": {"chat": PULSAR}}, args=["--lb-config-path=/etc/mine.json"])
    assert "router.args.0" in str(error.value) and "rendered from loadBalancer" in str(error.value)
    render(args=["--lb-config-path=/etc/mine.json"])  # your own file, without the setting
