"""Kubernetes' own ranges and syntax (issue 25 item 2): what `validate` accepts the API server
accepts. Every integer in int32 range, every label key/value we pass (selectors, labels to set,
tolerations) in Kubernetes' label syntax, class names DNS subdomains, Secret keys and env names
as the API server validates them; each refusal names the field path and says what to write."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel

from components.compile import compile_stack
from components.config import ConfigError, StackConfig, load_stack_config
from components.config.kube import INT32_MAX, label_problems
from components.config.types import Strict, _is_int_field
from tests.compile.test_schema import assert_strictly_valid
from tests.support.builders import model, nim_model

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.6.0"


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    return caught.value.problems


def _sections(root: type[BaseModel]) -> set[type[Strict]]:
    """Every config model reachable from the stack."""
    found: set[type[Strict]] = set()
    todo: list[typing.Any] = [root]
    while todo:
        annotation = todo.pop()
        if isinstance(annotation, type) and issubclass(annotation, Strict):
            if annotation in found:
                continue
            found.add(annotation)
            todo.extend(field.annotation for field in annotation.model_fields.values())
        else:
            todo.extend(typing.get_args(annotation))
    return found


INT_FIELDS = sorted(
    ((section, field.alias or name) for section in _sections(StackConfig)
     for name, field in section.model_fields.items()
     if _is_int_field(field.annotation) and name not in section.not_kubernetes_ints),
    key=lambda item: (item[0].__name__, item[1]),
)


def test_the_walk_finds_the_integer_fields():
    names = {f"{section.__name__}.{key}" for section, key in INT_FIELDS}
    assert {"ModelConfig.replicas", "RouterConfig.replicas", "Autoscaling.maxReplicas",
            "PlatformConfig.vllmUid", "BackendRouter.replicas"} <= names


@pytest.mark.parametrize(("section", "key"), INT_FIELDS, ids=[f"{s.__name__}.{k}" for s, k in INT_FIELDS])
def test_every_integer_field_stays_in_int32(section, key):
    """Each integer field of every section refuses 2^31 at its own path, whatever the field."""
    with pytest.raises(Exception) as caught:
        section.model_validate({key: INT32_MAX + 1})
    mine = [e for e in caught.value.errors() if e["loc"] == (key,)]
    assert mine and "32-bit integer range" in str(mine[0]["msg"]), caught.value.errors()


def test_a_byte_count_that_never_reaches_kubernetes_is_not_held_to_int32():
    """An S3 object of 3 GiB and its parts of up to 5 GiB (preview's listing) are plain byte
    counts, not Kubernetes fields; they are the only exemptions, and the walk above holds every
    other integer to int32."""
    from components.config.sources import S3Object

    listed = S3Object.model_validate({"key": "model.safetensors", "size": 30 * 2**30, "partSize": 5 * 2**30})
    assert (listed.size, listed.part_size) == (30 * 2**30, 5 * 2**30)
    exempt = {f"{section.__name__}.{name}" for section in _sections(StackConfig) for name in section.not_kubernetes_ints}
    assert exempt <= {"S3Object.size", "S3Object.part_size"}


def test_replicas_beyond_int32_named_with_the_fix():
    (line,) = problems_of({"models": [model(replicas=INT32_MAX + 1,
                                            weights={"accessMode": "ReadWriteMany"})]})
    assert line.startswith("models.0.replicas: 2147483648 is beyond Kubernetes' 32-bit integer range")
    assert "write a smaller number" in line


def test_the_largest_accepted_numbers_render_valid_objects():
    """The int32 ceiling everywhere it lands: replicas, autoscaling bounds, uid/gid, router replicas."""
    config = load_stack_config({
        "platform": {"vllmUid": INT32_MAX, "vllmGid": INT32_MAX, "metrics": {"enabled": True}},
        "models": [
            model("big", replicas=INT32_MAX, weights={"accessMode": "ReadWriteMany"}),
            model("scaled", autoscaling={"enabled": True, "minReplicas": INT32_MAX - 1, "maxReplicas": INT32_MAX},
                  weights={"accessMode": "ReadWriteMany"}),
        ],
        "router": {"image": "nvcr.io/nvidia/llm-request-router:0.6.0", "replicas": INT32_MAX},
    })
    manifests = compile_stack(config)
    replicas = [m["spec"]["replicas"] for m in manifests if m["kind"] in ("Deployment", "StatefulSet")
                and "replicas" in m["spec"]]
    assert INT32_MAX in replicas
    assert_strictly_valid(manifests)


# --- labels and selectors -------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "path", "fragment"), [
    ({"models": [model(nodeSelector={"gpu type": "a100"})]}, "models.0.nodeSelector.gpu type", "not a label key"),
    ({"models": [model(nodeSelector={"gpu": "a100 80gb"})]}, "models.0.nodeSelector.gpu", "not a label value"),
    ({"models": [model(nodeSelector={"gpu": "x" * 64})]}, "models.0.nodeSelector.gpu", "64 characters"),
    ({"models": [model(nodeSelector={"Example.com/gpu": "a100"})]}, "models.0.nodeSelector.Example.com/gpu",
     "prefix must be a lowercase DNS subdomain"),
    ({"models": [model(nodeSelector={"n" * 64: "a100"})]}, "models.0.nodeSelector." + "n" * 64, "at most 63"),
    ({"platform": {"gpuNodeSelector": {"-gpu": "true"}}}, "platform.gpuNodeSelector.-gpu", "not a label key"),
    ({"platform": {"networkPolicy": {"allowFrom": [{"podSelector": {"app": "prom/server"}}]}}},
     "platform.networkPolicy.allowFrom.0.podSelector.app", "not a label value"),
    ({"platform": {"networkPolicy": {"allowFrom": [{"namespaceSelector": {"kubernetes.io/": "x"}}]}}},
     "platform.networkPolicy.allowFrom.0.namespaceSelector.kubernetes.io/", "name after the prefix is empty"),
    ({"platform": {"metrics": {"labels": {"release": "kube prometheus"}}}}, "platform.metrics.labels.release",
     "not a label value"),
    ({"platform": {"metrics": {"dashboard": {"labels": {"grafana_dashboard": "-1"}}}}},
     "platform.metrics.dashboard.labels.grafana_dashboard", "not a label value"),
    ({"platform": {"gpuTolerations": [{"key": "nvidia.com/gpu!", "operator": "Exists"}]}},
     "platform.gpuTolerations.0.key", "not a label key"),
    ({"platform": {"gpuTolerations": [{"operator": "Equal", "value": "gpu"}]}},
     "platform.gpuTolerations.0.key", "required with operator 'Equal'"),
    ({"models": [model(tolerations=[{"key": "gpu", "operator": "Equal", "value": "a b"}])]},
     "models.0.tolerations.0.value", "not a label value"),
    # The router's and the gateway's placement: the model's types, so the model's refusals.
    ({"models": [model()], "router": {"image": ROUTER_IMAGE, "nodeSelector": {"pool": "cpu only"}}},
     "router.nodeSelector.pool", "not a label value"),
    ({"models": [model()], "router": {"image": ROUTER_IMAGE, "tolerations": [{"operator": "Equal", "value": "x"}]}},
     "router.tolerations.0.key", "required with operator 'Equal'"),
    ({"models": [model()], "router": {"image": ROUTER_IMAGE, "gateway": {"nodeSelector": {"-edge": "true"}}}},
     "router.gateway.nodeSelector.-edge", "not a label key"),
    ({"models": [model()], "router": {"image": ROUTER_IMAGE, "gateway": {
        "tolerations": [{"key": "edge", "operator": "Exists", "value": "yes"}]}}},
     "router.gateway.tolerations.0", "takes no value"),
])
def test_label_syntax_is_kubernetes(raw, path, fragment):
    lines = problems_of(raw)
    assert any(line.startswith(f"{path}:") and fragment in line for line in lines), lines


@pytest.mark.parametrize(("raw", "path", "fragment"), [
    ({"platform": {"storageClassName": "Fast_SSD"}}, "platform.storageClassName", "DNS subdomain"),
    ({"models": [model(weights={"storageClassName": "nfs."})]}, "models.0.weights.storageClassName", "DNS subdomain"),
    ({"models": [model(hfTokenSecret={"name": "hf", "key": "a/b"})]}, "models.0.hfTokenSecret.key", "not a Secret key"),
    ({"models": [model(env={"A=B": "x"})]}, "models.0.env.A=B", "not an environment variable name"),
    ({"platform": {"hfEndpoint": "http://hf-mirror.svc:65536"}}, "platform.hfEndpoint", "port outside 1-65535"),
    ({"models": [model(hfEndpoint="http://hf-mirror.svc:0")]}, "models.0.hfEndpoint", "port outside 1-65535"),
    ({"platform": {"autoscaling": {"prometheusAddress": "http://prom.svc:70000"}}},
     "platform.autoscaling.prometheusAddress", "not an http(s) URL"),
    ({"models": [model(env={"": "x"})]}, "models.0.env", "an empty name"),
    ({"models": [model()], "router": {"image": ROUTER_IMAGE, "env": {"X\tY": "1"}}},
     "router.env.X\tY", "not an environment variable name"),
])
def test_names_kubernetes_validates(raw, path, fragment):
    lines = problems_of(raw)
    assert any(line.startswith(f"{path}:") and fragment in line for line in lines), lines


def test_valid_labels_pass():
    assert label_problems({"example.com/gpu": "a100", "gpu": "", "a": "A-1_b.c", "k" * 63: "v" * 63}) == []
    config = load_stack_config({"models": [nim_model(nodeSelector={"nvidia.com/gpu.product": "H100-SXM"})]})
    assert config.models[0].node_selector == {"nvidia.com/gpu.product": "H100-SXM"}


def test_a_long_label_value_is_not_echoed_whole():
    value = "v" * 40 + "TAIL"
    lines = problems_of({"models": [model(nodeSelector={"gpu": value + "!"})]})
    assert not any("TAIL" in line for line in lines), lines
