"""VllmModel under Pulumi mocks: the resource graph, parents, ordering and ownership."""

from __future__ import annotations

import pulumi
import pytest

from providers import crd_check
from providers import resources as dynamic_resources
from tests.support.component_kit import declare_stack, record_graph

STACK = {
    "platform": {"sharedMemorySizeLimit": "1Gi"},
    "models": [
        {"name": "alpha", "source": {"repo": "org/alpha", "revision": "main"}, "resources": {"memory": "8Gi"}},
        {"name": "beta", "source": {"repo": "org/beta", "revision": "v1"}, "resources": {"memory": "8Gi"},
         "gpus": 2, "tensorParallelSize": 2, "lora": {"enabled": True}},
    ],
}


@pytest.fixture
def graph(monkeypatch):
    return record_graph(monkeypatch)


def deploy_stack(raw: dict):
    return list(declare_stack(raw)[1].servers.values())


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
def test_the_puller_job_is_deleted_before_it_is_replaced(graph):
    # Its pod template is immutable and an upgrade keeps its name: a create-before-delete
    # replacement would apply onto the old Job and fail "field is immutable".
    deploy_stack(STACK)
    assert graph.opts[graph.named("alpha-puller")].delete_before_replace is True
    assert not graph.opts["alpha-server"].delete_before_replace  # the rest keep the engine's default


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


@pulumi.runtime.test
def test_an_autoscaled_model_declares_the_crd_check_and_the_scaled_object(monkeypatch):
    graph = record_graph(monkeypatch, (dynamic_resources, "RequiredCrds"))
    deploy_stack({"platform": {"sharedMemorySizeLimit": "1Gi", "metrics": {"enabled": True}}, "models": [
        {"name": "gamma", "source": {"repo": "org/gamma"}, "resources": {"memory": "8Gi"},
         "weights": {"accessMode": "ReadWriteMany"}, "autoscaling": {"enabled": True, "maxReplicas": 3}}]})
    assert isinstance(graph.providers["gamma-crd-check"], crd_check.RequiredCrdsProvider)
    assert graph.props["gamma-crd-check"]["requirements"][0]["crds"] == ["scaledobjects.keda.sh"]
    assert graph.depends("gamma-crd-check") == ["platform-namespace", "platform-model-service-account",
                                                "platform-required-crds"]
    assert graph.manifests["gamma-scaled-object"]["kind"] == "ScaledObject"
    assert graph.depends("gamma-scaled-object") == ["gamma-server", "gamma-crd-check"]
    assert "replicas" not in graph.manifests["gamma-server"]["spec"]
    assert graph.props["gamma-status"]["min_replicas"] == 1


@pulumi.runtime.test
def test_a_next_revision_is_declared_by_the_model_beside_its_serving_objects(graph):
    raw = {**STACK, "models": [{**STACK["models"][0], "next": {"weight": 10, "source": {"repo": "org/alpha-2"}}}],
           "router": {"image": "nvcr.io/nvidia/llm-request-router:0.16.2", "workerAuth": {"mode": "open"},
                      "pylon": {"image": "nvcr.io/0651155215864979/ncp-dev/stargate-client:0.4.0"}}}
    (component,) = deploy_stack(raw)
    mine = [n for n in graph.opts if n.startswith("alpha-next-")]
    assert sorted(mine) == sorted(f"alpha-next-{role}" for role in ("server", "service", "status"))
    # Its weights are named as the model's will be with its source (no alias: they are new), pulled
    # and verified before its server starts, as the model's.
    server = graph.manifests["alpha-next-server"]["spec"]["template"]["spec"]
    (claim,) = [v["persistentVolumeClaim"]["claimName"] for v in server["volumes"] if "persistentVolumeClaim" in v]
    digest = claim.rsplit("-", 1)[1]
    volumes = sorted(n for n, m in graph.manifests.items() if m["kind"] == "PersistentVolumeClaim")
    # Two volumes, the model's and the revision's, each named (object and resource) after its source.
    assert len(volumes) == 2 and claim in volumes and graph.manifests[claim]["metadata"]["name"] == claim
    weights = [f"alpha-weights-{digest}", f"alpha-puller-{digest}", f"alpha-weights-gate-{digest}"]
    assert graph.depends(weights[1]) == ["alpha-weights"] and graph.depends(weights[2]) == ["alpha-puller"]
    assert graph.depends("alpha-next-server") == ["alpha-weights-gate"]
    assert graph.opts["alpha-next-server"].depends_on[0] is graph.objects[weights[2]]
    assert not any(graph.opts[name].aliases for name in weights)
    for name in mine + weights:
        assert graph.opts[name].parent is component, name
    assert graph.props["alpha-next-status"]["model"] == "alpha-next"
    assert component.next_status is not None

    def check(outputs):
        assert outputs["weight"] == 10 and outputs["objects"]["deployment"] == "alpha-next"

    return pulumi.Output.from_input(component.outputs["next"]).apply(check)


@pytest.mark.parametrize("role", ["weights", "puller", "weights-gate"])
def test_a_weights_child_is_named_after_its_source_and_keeps_its_deployed_state(graph, role):
    # The name before (`<model>-<role>`) is an alias: the engine takes the deployed resource for it.
    deploy_stack(STACK)
    name = graph.named(f"alpha-{role}")
    assert name != f"alpha-{role}" and name.startswith(f"alpha-{role}-")
    (alias,) = graph.opts[name].aliases
    assert alias.name == f"alpha-{role}"
