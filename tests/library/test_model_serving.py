"""``ModelServing`` under Pulumi mocks: the stack program's components and objects, parented to
it, on the caller's providers (inherited, never named per child), with typed outputs."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest

import llm_serving as llm
from components.resources import NimModel, RequestRouter, VllmModel
from tests.support.component_kit import Mocks, record_graph

REVISION = "0123456789abcdef0123456789abcdef01234567"
ARGS = llm.ModelServingArgs(
    namespace="team-a",
    models=[llm.ModelArgs("chat", llm.HubSource("acme/tiny-llm", revision=REVISION), gpus=1,
                          resources=llm.Resources(cpu="1", memory="24Gi")),
            llm.ModelArgs("embed", llm.HubSource("acme/tiny-embed", revision=REVISION), gpus=1,
                          resources=llm.Resources(cpu="1", memory="24Gi"))],
    router=llm.RouterArgs(image="registry.example.com/llm/request-router:0.16.2", settings={
        "pylon": {"image": "registry.example.com/llm/stargate-client:0.16.2"}, "workerAuth": {"mode": "open"}}))


pytestmark = pytest.mark.usefixtures("kubeconfig")  # tests/library/conftest.py


@pulumi.runtime.test
def test_the_set_declares_the_stack_programs_components_under_it(graph):
    cluster = k8s.Provider("team-cluster")
    serving = llm.ModelServing("team-a", ARGS, pulumi.ResourceOptions(providers=[cluster]))
    assert set(serving.servers) == {"chat", "embed"}
    assert all(isinstance(s, VllmModel) and not isinstance(s, NimModel) for s in serving.servers.values())
    assert isinstance(serving.request_router, RequestRouter)
    kinds = {type(r).__name__ for r in (*serving.servers.values(), serving.request_router)}
    assert kinds == {"VllmModel", "RequestRouter"}
    # The stack program's logical names, model for model (compile/plan.py): no prefix of ours.
    assert {"chat-server", "chat-service", "embed-server", "llm-router-workload"} <= set(graph.manifests)

    def check(_):
        for name in graph.objects:
            # Every object reaches the cluster through the caller's provider, by inheritance.
            assert graph.opts[name].provider is None, name
        for name in ("chat-server", "team-a-platform-model-service-account", "llm-router-workload"):
            assert graph.objects[name]._provider is cluster, name

    return serving.urn.apply(check)


@pulumi.runtime.test
def test_outputs_are_typed_per_model(graph):
    serving = llm.ModelServing("team-a", ARGS)

    def check(values):
        endpoints, states, router = values
        assert endpoints == {"chat": "http://chat.team-a.svc.cluster.local:8000",
                             "embed": "http://embed.team-a.svc.cluster.local:8000"}
        assert states == {"chat": "READY", "embed": "READY"}
        assert router and "llm-router" in str(router)

    return pulumi.Output.all(serving.endpoints, serving.states, serving.router).apply(check)


def test_a_bad_argument_registers_nothing(monkeypatch):
    registered = []

    class Recording(Mocks):
        def new_resource(self, args):
            registered.append(args.name)
            return super().new_resource(args)

    pulumi.runtime.set_mocks(Recording(), preview=False)
    bad = llm.ModelServingArgs(namespace="team-a", models=[llm.ModelArgs("chat", llm.HubSource("acme/x"), gpus=-2)])
    with pytest.raises(ValueError, match=r"models\[0\]\.gpus"):
        llm.ModelServing("team-a", bad)
    assert registered == []


@pulumi.runtime.test
def test_the_callers_depends_on_holds_for_the_first_objects(graph):
    cluster = k8s.Provider("team-cluster")
    namespace = k8s.core.v1.Namespace("team-namespace", metadata={"name": "team-a"},
                                      opts=pulumi.ResourceOptions(provider=cluster))
    llm.ModelServing("team-a", ARGS, pulumi.ResourceOptions(providers=[cluster], depends_on=[namespace]))
    service_account = graph.opts["team-a-platform-model-service-account"]
    assert namespace in service_account.depends_on
    # Every model object waits on the platform's, so on the namespace too.
    assert graph.objects["team-a-platform-model-service-account"] in graph.opts[graph.named("chat-weights")].depends_on


@pulumi.runtime.test
def test_the_kubeconfig_content_reaches_every_reader_of_the_cluster_as_a_secret(monkeypatch):
    from providers import resources as dynamic_resources

    pulumi.runtime.set_mocks(Mocks(), preview=False)
    # Every component declares its dynamic resources from providers.resources (resources/declare.py).
    graph = record_graph(monkeypatch, (dynamic_resources, "RequiredCrds"), (dynamic_resources, "RouterTargets"))
    args = llm.ModelServingArgs(namespace="team-a", models=ARGS.models, router=ARGS.router,
                                platform={"metrics": {"enabled": True}}, kubeconfig_content="apiVersion: v1\n")
    llm.ModelServing("team-a", args)
    readers = {name: props for name, props in graph.props.items() if "kubeconfig" in props}
    assert {"chat-status", "llm-router-targets", "team-a-platform-required-crds"} <= set(readers), sorted(readers)

    def check(values):
        for name, (value, secret) in zip(readers, values, strict=True):
            assert (value, secret) == ("apiVersion: v1\n", True), name
            assert "kubeconfig_data" in graph.opts[name].additional_secret_outputs, name

    return pulumi.Output.all(*[pulumi.Output.all(props["kubeconfig_data"], pulumi.Output.is_secret(props["kubeconfig_data"]))
                               for props in readers.values()]).apply(check)


@pulumi.runtime.test
def test_without_content_no_reader_records_any(graph):
    llm.ModelServing("team-a", ARGS)
    readers = {name: props for name, props in graph.props.items() if "kubeconfig" in props}
    assert readers and all("kubeconfig_data" not in props for props in readers.values())
