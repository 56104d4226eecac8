"""VllmModel under Pulumi mocks: the resource graph, parents, ordering and ownership."""

from __future__ import annotations

import pulumi
import pytest

import providers.resources as dynamic_resources
from components.config import load_stack_config
from components.resources import kubernetes as kube_resources

STACK = {
    "platform": {"sharedMemorySizeLimit": "1Gi"},
    "models": [
        {"name": "alpha", "source": {"repo": "org/alpha", "revision": "main"}, "resources": {"memory": "8Gi"}},
        {"name": "beta", "source": {"repo": "org/beta", "revision": "v1"}, "resources": {"memory": "8Gi"},
         "gpus": 2, "tensorParallelSize": 2, "lora": {"enabled": True}},
    ],
}


class Mocks(pulumi.runtime.Mocks):
    def __init__(self):
        self.created: dict[str, pulumi.runtime.MockResourceArgs] = {}

    def new_resource(self, args):
        self.created[args.name] = args
        outputs = dict(args.inputs)
        if args.typ.endswith("ModelStatus"):
            outputs.update(state="READY", message="serving", targets=["alpha-0"], ready_replicas=1)
        return [f"{args.name}-id", outputs]

    def call(self, args):
        return {}


class Graph:
    """Every child resource declared, with the options it was declared with."""

    def __init__(self):
        self.opts: dict[str, pulumi.ResourceOptions] = {}
        self.objects: dict[str, pulumi.Resource] = {}
        self.manifests: dict[str, dict] = {}

    def depends(self, name: str) -> list[str]:
        by_id = {id(r): n for n, r in self.objects.items()}
        return [by_id.get(id(d), "?") for d in (self.opts[name].depends_on or [])]


@pytest.fixture
def graph(monkeypatch):
    recorded = Graph()
    original_apply = kube_resources.apply

    def apply(name, manifest, opts=None):
        recorded.opts[name] = opts
        recorded.manifests[name] = manifest
        recorded.objects[name] = original_apply(name, manifest, opts)
        return recorded.objects[name]

    monkeypatch.setattr(kube_resources, "apply", apply)
    for cls_name in ("WeightsGate", "ModelStatus"):
        original = getattr(dynamic_resources, cls_name)

        class Recording(original, module="llm-serving", name=cls_name):
            def __init__(self, name, props, provider, opts=None, _original=original):
                recorded.opts[name] = opts
                super().__init__(name, props, provider, opts)
                recorded.objects[name] = self

        monkeypatch.setattr(dynamic_resources, cls_name, Recording)
    return recorded


def deploy_stack(raw: dict):
    from components.resources import Deploy, Platform, VllmModel

    pulumi.runtime.set_mocks(Mocks(), preview=False)
    stack = load_stack_config(raw)
    platform = Platform("platform", stack, None)
    deploy = Deploy(provider=None, cluster=stack.cluster, depends_on=platform.ready)
    return [VllmModel(m, stack, deploy) for m in stack.models]


@pulumi.runtime.test
def test_staged_rollout_order(graph):
    deploy_stack(STACK)
    assert graph.depends("alpha-weights") == ["platform-namespace", "platform-model-service-account"]
    assert graph.depends("alpha-puller") == ["alpha-weights"]
    assert graph.depends("alpha-weights-gate") == ["alpha-puller"]
    # The serving Deployment waits on the gate, never on the Job alone.
    assert graph.depends("alpha-server") == ["alpha-weights-gate"]
    assert graph.depends("alpha-service") == ["alpha-server"]
    assert graph.depends("alpha-status") == ["alpha-server", "alpha-service"]


@pulumi.runtime.test
def test_every_object_is_parented_to_its_model(graph):
    components = deploy_stack(STACK)
    for component in components:
        mine = [n for n in graph.opts if n.startswith(component._name + "-")]
        assert len(mine) == 6
        for name in mine:
            assert graph.opts[name].parent is component, name


@pulumi.runtime.test
def test_no_owner_reference_can_garbage_collect_the_weights(graph):
    deploy_stack(STACK)
    for name, manifest in graph.manifests.items():
        assert "ownerReferences" not in manifest["metadata"], name


@pulumi.runtime.test
def test_render_mode_declares_no_dynamic_resources(graph):
    deploy_stack({**STACK, "cluster": {"renderYamlToDirectory": "/tmp/render"}})
    assert not [n for n in graph.opts if n.endswith(("-gate", "-status"))]
    # Order still holds without a cluster: the Deployment comes after the puller.
    assert graph.depends("alpha-server") == ["alpha-puller"]


@pulumi.runtime.test
def test_outputs_name_the_endpoint(graph):
    components = deploy_stack(STACK)

    def check(url):
        assert url == "http://alpha.llm-serving.svc.cluster.local:8000"

    return components[0].endpoint_url.apply(check)
