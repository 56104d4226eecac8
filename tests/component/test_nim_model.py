"""NimModel under Pulumi mocks: both paths' resource graphs, parents, ordering and options."""

from __future__ import annotations

import pulumi
import pytest

import providers.nim_status as nim_status
import providers.resources as dynamic_resources
from components.compile.plan import stack_plan
from components.config import load_stack_config
from components.resources import Deploy, NimModel
from tests.support.component_kit import Mocks, declare_stack, record_graph

NGC_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"
OPERATOR = {"name": "op", "engine": "nim", "path": "operator", "image": NGC_IMAGE,
            "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}, "resources": {"memory": "48Gi"},
            "nim": {"authSecret": "ngc-api"}}
RAW = {"name": "raw", "engine": "nim", "image": NGC_IMAGE, "source": {"repo": "org/raw"},
       "resources": {"memory": "48Gi"}, "nim": {"authSecret": "ngc-api"}}
VLLM = {"name": "plain", "source": {"repo": "org/plain"}, "resources": {"memory": "32Gi"}}
STACK = {"platform": {"sharedMemorySizeLimit": "1Gi"}, "models": [OPERATOR, RAW]}


@pytest.fixture
def graph(monkeypatch):
    return record_graph(monkeypatch, (dynamic_resources, "NimOperatorCheck"), (dynamic_resources, "RequiredCrds"))


def deploy_stack(raw: dict):
    return list(declare_stack(raw, Mocks(status_target="op-0"))[1].servers.values())


@pulumi.runtime.test
def test_operator_path_order(graph):
    deploy_stack(STACK)
    # The CRD check comes first: nothing NIM-specific reaches a cluster without the operator.
    # The platform's check of every CRD the stack needs (the operator's too) comes first of all.
    assert graph.depends("op-nim-operator-check") == ["platform-namespace", "platform-model-service-account",
                                                      "platform-required-crds"]
    assert graph.depends("op-nim-cache") == ["op-nim-operator-check"]
    assert graph.depends("op-nim-service") == ["op-nim-cache"]
    assert graph.depends("op-status") == ["op-nim-service"]
    assert {n for n in graph.opts if n.startswith("op-")} == {
        "op-nim-operator-check", "op-nim-cache", "op-nim-service", "op-status"}


@pulumi.runtime.test
def test_operator_path_objects_and_options(graph):
    deploy_stack(STACK)
    assert graph.manifests["op-nim-cache"]["kind"] == "NIMCache"
    assert graph.manifests["op-nim-service"]["kind"] == "NIMService"
    cache_name = graph.manifests["op-nim-cache"]["metadata"]["name"]
    assert graph.manifests["op-nim-service"]["spec"]["storage"]["nimCache"]["name"] == cache_name
    # The NIMCache spec is immutable: a change replaces it, never patches it.
    assert graph.opts["op-nim-cache"].replace_on_changes == ["spec"]
    assert isinstance(graph.objects["op-nim-cache"], pulumi.CustomResource)
    assert graph.props["op-nim-operator-check"]["crds"] == ["nimcaches.apps.nvidia.com", "nimservices.apps.nvidia.com"]
    assert isinstance(graph.providers["op-nim-operator-check"], nim_status.NimOperatorCheckProvider)
    assert isinstance(graph.providers["op-status"], nim_status.NimStatusProvider)
    props = graph.props["op-status"]
    assert (props["nim_service"], props["nim_cache"], props["namespace"]) == ("op", cache_name, "llm-serving")


@pulumi.runtime.test
def test_raw_path_is_the_vllm_graph_with_nims_objects(graph):
    deploy_stack(STACK)
    assert graph.depends("raw-puller") == ["raw-weights"]
    assert graph.depends("raw-weights-gate") == ["raw-puller"]
    assert graph.depends("raw-server") == ["raw-weights-gate"]
    assert graph.depends("raw-service") == ["raw-server"]
    assert graph.depends("raw-status") == ["raw-server", "raw-service"]
    assert "raw-nim-operator-check" not in graph.opts
    pod = graph.manifests["raw-server"]["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (1000, 2000)
    assert pod["containers"][0]["image"] == NGC_IMAGE


@pulumi.runtime.test
def test_every_object_is_parented_to_its_model_with_the_nim_type(graph):
    components = deploy_stack(STACK)
    for component in components:
        assert component._type == "llm-serving:index:NimModel"
        mine = [n for n in graph.opts if n.startswith(component._name + "-")]
        assert mine
        for name in mine:
            assert graph.opts[name].parent is component, name


@pulumi.runtime.test
def test_vllm_only_stack_declares_nothing_nim(graph):
    deploy_stack({"models": [VLLM]})
    assert not [n for n in graph.opts if "nim" in n]
    assert not [m for m in graph.manifests.values() if m["apiVersion"].startswith("apps.nvidia.com")]


@pulumi.runtime.test
def test_render_mode_has_no_check_and_no_status(graph):
    deploy_stack({**STACK, "cluster": {"renderYamlToDirectory": "/tmp/render"}})
    assert not [n for n in graph.opts if n.endswith(("-check", "-status", "-gate"))]
    assert graph.depends("op-nim-cache") == ["platform-namespace", "platform-model-service-account"]
    assert graph.depends("op-nim-service") == ["op-nim-cache"]


@pulumi.runtime.test
def test_nim_model_refuses_vllm_models(graph):
    pulumi.runtime.set_mocks(Mocks(), preview=False)
    stack = load_stack_config({"models": [VLLM]})
    with pytest.raises(ValueError, match="NimModel serves NIM only"):
        NimModel(stack_plan(stack).models[0], Deploy(provider=None, rendering=False))


@pulumi.runtime.test
def test_outputs_name_the_endpoint_and_objects(graph):
    components = deploy_stack(STACK)
    operator = components[0]
    assert operator.outputs["objects"]["nim_service"] == "op"
    assert operator.outputs["objects"]["nim_cache"].startswith("op-cache-")

    def check(values):
        url, state = values
        assert url == "http://op.llm-serving.svc.cluster.local:8000"
        assert state == "READY"

    return pulumi.Output.all(operator.endpoint_url, operator.state).apply(check)
