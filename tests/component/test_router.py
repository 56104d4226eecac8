"""RequestRouter under Pulumi mocks: resource graph, parents, ordering, and the kind guard."""

from __future__ import annotations

import pulumi
import pytest

import providers.resources as dynamic_resources
from providers.router_guard import WorkloadKindGuardProvider
from tests.support.component_kit import Graph, declare_stack, record_graph

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
MODELS = [
    {"name": "alpha", "source": {"repo": "org/alpha"}, "resources": {"memory": "8Gi"}},
    {"name": "beta", "source": {"repo": "org/beta"}, "resources": {"memory": "8Gi"}},
]
MULTI = {"image": ROUTER_IMAGE, "replicas": 3, "metrics": {"serviceMonitor": True}, "tls": {"enabled": True}}


@pytest.fixture
def graph(monkeypatch):
    return record_graph(monkeypatch, (dynamic_resources, "WorkloadKindGuard"), (dynamic_resources, "RouterTargets"),
                        (dynamic_resources, "RequiredCrds"))


def deploy_stack(graph: Graph, router: dict, **extra):
    _, declared = declare_stack(
        {"platform": {"sharedMemorySizeLimit": "1Gi"}, "models": MODELS, "router": router, **extra})
    graph.objects.update(declared.servers)
    return declared.router


@pulumi.runtime.test
def test_multi_replica_graph_and_order(graph):
    deploy_stack(graph, MULTI)
    # The platform's check of every CRD the stack needs (cert-manager's here) before any of them.
    base = ["platform-namespace", "platform-model-service-account", "platform-required-crds"]
    for name in ("llm-router-service-account", "llm-router-role", "llm-router-headless-service",
                 "llm-router-backend-service-account", "llm-router-backend-role", "llm-router-crd-check",
                 "llm-router-workload-kind"):
        assert graph.depends(name) == base, name
    assert graph.depends("llm-router-role-binding") == ["llm-router-service-account", "llm-router-role"]
    assert graph.depends("llm-router-backend-role-binding") == [
        "llm-router-backend-service-account", "llm-router-backend-role"]
    # Another operator's kinds wait for the check that the cluster serves them.
    assert graph.depends("llm-router-issuer") == ["llm-router-crd-check"]
    assert graph.depends("llm-router-certificate") == ["llm-router-issuer"]
    # The backend router watches the headless Service and mounts the certificate's Secret.
    assert graph.depends("llm-router-backend") == [
        "llm-router-backend-role-binding", "llm-router-headless-service", "llm-router-certificate"]
    assert graph.depends("llm-router-backend-service") == ["llm-router-backend"]
    assert graph.depends("llm-router-backend-pdb") == ["llm-router-backend"]
    assert graph.depends("llm-router-backend-service-monitor") == ["llm-router-backend-service", "llm-router-crd-check"]
    # The router pods come after everything they use, and after the models they front.
    assert graph.depends("llm-router-workload") == [
        *base, "llm-router-role-binding", "llm-router-headless-service", "llm-router-certificate",
        "llm-router-backend-service", "llm-router-workload-kind", "alpha", "beta",
    ]
    assert graph.depends("llm-router-service") == ["llm-router-workload"]
    assert graph.depends("llm-router-pdb") == ["llm-router-workload"]
    assert graph.depends("llm-router-service-monitor") == ["llm-router-service", "llm-router-crd-check"]
    # Read after the router workload: the models it fronts already waited for their targets.
    assert graph.depends("llm-router-targets") == ["llm-router-workload"]


@pulumi.runtime.test
def test_network_policies_come_before_the_router_pods(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE, "replicas": 2},
                 platform={"sharedMemorySizeLimit": "1Gi", "networkPolicy": {"enabled": True}})
    for policy in ("llm-router-network-policy", "llm-router-backend-network-policy"):
        assert policy in graph.depends("llm-router-workload")


@pulumi.runtime.test
def test_the_crd_check_names_each_setting_and_its_crds(graph):
    deploy_stack(graph, MULTI)
    requirements = graph.props["llm-router-crd-check"]["requirements"]
    assert [(r["field"], r["crds"]) for r in requirements] == [
        ("router.tls", ["issuers.cert-manager.io", "certificates.cert-manager.io"]),
        ("router.metrics.serviceMonitor", ["servicemonitors.monitoring.coreos.com"]),
    ]
    assert type(graph.providers["llm-router-crd-check"]).__name__ == "RequiredCrdsProvider"


@pulumi.runtime.test
def test_no_crd_check_when_nothing_needs_another_operator(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE})
    assert "llm-router-crd-check" not in graph.opts


@pulumi.runtime.test
def test_router_targets_read_the_fronted_models_services(graph):
    component = deploy_stack(graph, MULTI)
    props = graph.props["llm-router-targets"]
    assert props["services"] == {"alpha": "alpha", "beta": "beta"}
    assert (props["router"], props["namespace"]) == ("llm-router", "llm-serving")
    assert "targets" in component.outputs
    assert type(graph.providers["llm-router-targets"]).__name__ == "RouterTargetsProvider"
    # The models' recorded targets are inputs: a model status re-recorded re-reads the router's.
    assert len(props["fronted_targets"]) == 2
    return pulumi.Output.all(*props["fronted_targets"]).apply(lambda lists: _check_fronted(lists))


def _check_fronted(lists):
    assert lists == [["alpha-0"], ["alpha-0"]]


@pulumi.runtime.test
def test_every_child_is_parented_to_the_router(graph):
    component = deploy_stack(graph, MULTI)
    mine = [n for n in graph.opts if n.startswith("llm-router-")]
    assert len(mine) == 24  # 20 router objects, and the gateway's ConfigMap, Deployment, Service, PDB
    for name in mine:
        assert graph.opts[name].parent is component, name

    def check(urns):
        router, monitor, certificate = urns
        assert router.endswith("$llm-serving:index:RequestRouter::llm-router")
        assert monitor.endswith("$kubernetes:monitoring.coreos.com/v1:ServiceMonitor::llm-router-backend-service-monitor")
        assert certificate.endswith("$kubernetes:cert-manager.io/v1:Certificate::llm-router-certificate")

    return pulumi.Output.all(component.urn, graph.objects["llm-router-backend-service-monitor"].urn,
                             graph.objects["llm-router-certificate"].urn).apply(check)


@pulumi.runtime.test
def test_single_replica_has_no_backend_router_objects(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE})
    assert sorted(n for n in graph.opts if n.startswith("llm-router-")) == [
        "llm-router-gateway", "llm-router-gateway-config", "llm-router-gateway-pdb", "llm-router-gateway-service",
        "llm-router-headless-service", "llm-router-role", "llm-router-role-binding", "llm-router-service",
        "llm-router-service-account", "llm-router-targets", "llm-router-workload", "llm-router-workload-kind",
    ]


@pulumi.runtime.test
def test_statefulset_waits_for_its_headless_service(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE, "workload": {"kind": "StatefulSet"}, "models": ["beta"]})
    assert "llm-router-headless-service" in graph.depends("llm-router-workload")
    assert graph.depends("llm-router-workload")[-1] == "beta"  # only the fronted model


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_the_workload_type_is_its_kind_so_a_switch_is_a_visible_create_and_delete(graph, kind):
    """Same child name, different Pulumi type (so a different URN): a switch is never an
    in-place update; the preview shows the new kind created and the old one deleted."""

    @pulumi.runtime.test
    def run():
        deploy_stack(graph, {"image": ROUTER_IMAGE, "workload": {"kind": kind}})

        def check(urn):
            assert urn.endswith(f"$kubernetes:apps/v1:{kind}::llm-router-workload")
            assert not graph.opts["llm-router-workload"].aliases

        return graph.objects["llm-router-workload"].urn.apply(check)

    run()


@pytest.mark.parametrize("router, topology", [
    ({}, "single-deployment"),
    ({"replicas": 2}, "deployment+backend"),
    ({"replicas": 2, "workload": {"kind": "StatefulSet"}}, "statefulset-dns"),
    ({"workload": {"kind": "StatefulSet"}, "dnsDiscovery": False}, "statefulset"),
])
def test_the_status_output_names_the_topology(graph, router, topology):
    @pulumi.runtime.test
    def run():
        component = deploy_stack(graph, {"image": ROUTER_IMAGE, **router})
        assert component.outputs["topology"] == topology
        assert component.outputs["topology_reason"]

    run()


@pulumi.runtime.test
def test_guard_carries_kind_and_acknowledgement(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE, "workload": {"kind": "Deployment", "migrateFrom": "StatefulSet"}})
    props = graph.props["llm-router-workload-kind"]
    assert {k: props[k] for k in ("router", "kind", "migrate_from", "kind_explicit")} == {
        "router": "llm-router", "kind": "Deployment", "migrate_from": "StatefulSet", "kind_explicit": True,
    }


@pulumi.runtime.test
def test_guard_knows_when_the_kind_came_from_the_default(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE})
    assert graph.props["llm-router-workload-kind"]["kind_explicit"] is False


@pulumi.runtime.test
def test_render_mode_keeps_the_guard(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE}, cluster={"renderYamlToDirectory": "/tmp/render"})
    assert "llm-router-workload-kind" in graph.depends("llm-router-workload")
    # No cluster to read in render mode: no targets resource, no targets output.
    assert "llm-router-targets" not in graph.opts


@pulumi.runtime.test
def test_outputs(graph):
    component = deploy_stack(graph, MULTI)
    assert component.outputs["workload_kind"] == "Deployment"
    assert component.outputs["topology"] == "deployment+backend"
    assert component.outputs["discovery"] == ["backend-router", "dns"]
    assert component.outputs["models"] == ["alpha", "beta"]
    assert component.outputs["pylon_address"] == "http://llm-router-backend-router.llm-serving.svc.cluster.local:50071"
    assert component.outputs["objects"]["headless_service"] == "llm-router-headless"

    # Clients call the gateway; the router Service stays (TLS covers the pylon-facing QUIC/gRPC
    # identity; both speak plain HTTP on 8000).
    assert component.outputs["router_url"] == "http://llm-router.llm-serving.svc.cluster.local:8000"
    assert component.outputs["objects"]["gateway"] == "llm-router-gateway"

    def check(url):
        assert url == "http://llm-router-gateway.llm-serving.svc.cluster.local:8000"

    return component.endpoint_url.apply(check)


# --- the guard provider (no cluster: state only) ----------------------------------------------

def guard_props(kind: str, migrate_from: str = "", kind_explicit: bool = True) -> dict:
    return {"router": "llm-router", "kind": kind, "migrate_from": migrate_from, "kind_explicit": kind_explicit}


def test_guard_accepts_a_first_deployment_and_an_unchanged_kind():
    provider = WorkloadKindGuardProvider()
    assert provider.check({}, guard_props("Deployment")).failures == []
    assert provider.check(guard_props("StatefulSet"), guard_props("StatefulSet")).failures == []


def test_guard_refuses_a_silent_flip_from_a_changed_default():
    failures = WorkloadKindGuardProvider().check(
        guard_props("StatefulSet", kind_explicit=False), guard_props("Deployment", kind_explicit=False)).failures
    assert [f.property for f in failures] == ["kind"]
    assert "by default" in failures[0].reason and "pin workload.kind: StatefulSet" in failures[0].reason


def test_guard_refuses_an_unacknowledged_edit_and_accepts_an_acknowledged_one():
    provider = WorkloadKindGuardProvider()
    assert provider.check(guard_props("StatefulSet"), guard_props("Deployment")).failures
    assert provider.check(guard_props("StatefulSet"), guard_props("Deployment", "StatefulSet")).failures == []


def test_guard_records_the_new_kind_with_full_outputs():
    provider = WorkloadKindGuardProvider()
    created = provider.create(guard_props("StatefulSet"))
    assert created.outs["kind"] == "StatefulSet"
    assert provider.diff(created.id, created.outs, guard_props("Deployment", "StatefulSet")).changes is True
    assert provider.diff(created.id, created.outs, guard_props("StatefulSet")).changes is False
    assert provider.update(created.id, created.outs, guard_props("Deployment", "StatefulSet")).outs["kind"] == "Deployment"


def test_the_guard_provider_pickles_with_dill_as_the_engine_does():
    """The engine stores the provider in state and runs the stored one: it must round-trip."""
    import base64

    import dill
    from pulumi.dynamic.dynamic import serialize_provider

    restored = dill.loads(base64.b64decode(serialize_provider(WorkloadKindGuardProvider())))
    assert restored.check(guard_props("StatefulSet"), guard_props("Deployment")).failures


@pulumi.runtime.test
def test_the_gateway_starts_after_the_router_service_and_its_config(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE})
    assert {"llm-router-service", "llm-router-gateway-config"} <= set(graph.depends("llm-router-gateway"))
    assert graph.depends("llm-router-gateway-service") == ["llm-router-gateway"]


@pulumi.runtime.test
def test_gateway_off_declares_none_of_its_objects(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE, "gateway": {"enabled": False}})
    assert not [n for n in graph.opts if "gateway" in n]


@pulumi.runtime.test
def test_gateway_tls_issues_its_certificate_before_the_pods_that_mount_it(graph):
    component = deploy_stack(graph, {"image": ROUTER_IMAGE, "gateway": {"tls": {"enabled": True}}})
    assert graph.depends("llm-router-gateway-issuer") == ["llm-router-crd-check"]
    assert graph.depends("llm-router-gateway-certificate") == ["llm-router-gateway-issuer"]
    assert "llm-router-gateway-certificate" in graph.depends("llm-router-gateway")
    requirements = graph.props["llm-router-crd-check"]["requirements"]
    assert [(r["field"], r["crds"]) for r in requirements] == [
        ("router.gateway.tls", ["issuers.cert-manager.io", "certificates.cert-manager.io"])]
    assert component.outputs["endpoint_url"] == "https://llm-router-gateway.llm-serving.svc.cluster.local:8000"
    assert component.outputs["objects"]["gateway_tls_secret"] == "llm-router-gateway-tls"


@pulumi.runtime.test
def test_gateway_tls_from_an_existing_secret_declares_no_cert_manager_object(graph):
    deploy_stack(graph, {"image": ROUTER_IMAGE, "gateway": {"tls": {"enabled": True, "existingSecret": "gw-tls"}}})
    assert not [n for n in graph.opts if n.endswith(("-issuer", "-certificate", "-crd-check"))]
