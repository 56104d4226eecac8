"""RouterTargets provider: what the router can reach under the upstream rules, read in two calls
(EndpointSlices, pods).

Router pods: the headless Service's slices with named grpc/TCP and quic/UDP ports, ready and not
terminating endpoints, by ``targetRef.name`` (devilkun/nvcf@e07119fa stargate-k8s-router
``src/endpoints.rs``). Models: ready endpoints of the model's Service whose pod has a ready
``pylon`` container (the observable proxy for a registration)."""

from __future__ import annotations

from providers.router_targets import RouterTargetsProvider, read_router_targets, service_selector
from tests.support.fakes import NS, FakeCluster, api_error, endpoint, endpoint_slice
from tests.support.router_world import HEADLESS, PROPS, ROUTER_PORTS, SERVICES, cluster, model_pod, pods, router_slice, slices


def test_the_selector_names_every_fronted_service_and_the_headless_once():
    assert service_selector({"a": "svc-b", "b": "svc-a", "c": "svc-a"}) == "kubernetes.io/service-name in (svc-a,svc-b)"
    assert service_selector({"a": "svc-b"}, "r-headless") == "kubernetes.io/service-name in (r-headless,svc-b)"


def test_router_pods_and_models_in_two_calls_other_services_ignored():
    fake = cluster()
    targets = read_router_targets(fake.clients(), NS, SERVICES, HEADLESS)
    outputs = targets.as_outputs()
    assert outputs["routers"] == ["llm-router-0"]  # terminating and not-ready left out
    assert outputs["models"] == {"llama": ["llama-0", "llama-2"], "qwen": ["qwen-0"]}
    assert outputs["reachable"] is True and targets.count == 3
    assert fake.count("list_namespaced_endpoint_slice") == 1 and fake.count("list_namespaced_pod") == 1


def test_a_model_pod_counts_only_with_a_ready_pylon_beside_it():
    fake = FakeCluster().put(*slices(), model_pod("llama-0", pylon_ready=False), model_pod("llama-2", pylon=False),
                             model_pod("qwen-0"))
    targets = read_router_targets(fake.clients(), NS, SERVICES, HEADLESS)
    assert targets.as_outputs()["models"] == {"llama": [], "qwen": ["qwen-0"]}
    assert targets.reachable is False


def test_a_headless_slice_without_both_named_ports_gives_no_router_pod():
    only_grpc = [ROUTER_PORTS[0]]
    quic_as_tcp = [ROUTER_PORTS[0], {"name": "quic", "port": 50072, "protocol": "TCP"}]
    for ports in (only_grpc, quic_as_tcp, [{"name": "http", "port": 8000, "protocol": "TCP"}]):
        fake = FakeCluster().put(router_slice("router-a", [endpoint("llm-router-0", "10.0.3.1")], ports), *pods())
        targets = read_router_targets(fake.clients(), NS, SERVICES, HEADLESS)
        assert targets.routers.pods == [] and targets.reachable is False


def test_a_ready_but_not_serving_router_endpoint_is_a_router_pod():
    # Upstream includes it (endpoints.rs: a published warming endpoint); serving is not read.
    fake = FakeCluster().put(router_slice("router-a", [endpoint("llm-router-0", "10.0.3.1", serving=False)]), *pods())
    assert read_router_targets(fake.clients(), NS, SERVICES, HEADLESS).routers.pods == ["llm-router-0"]


def test_create_records_targets_and_refresh_follows_scaling():
    fake = cluster()
    provider = RouterTargetsProvider(connect=lambda target: fake.clients())
    created = provider.create(dict(PROPS))
    assert created.outs["targets"]["models"]["qwen"] == ["qwen-0"]
    assert created.outs["targets"]["routers"] == ["llm-router-0"]  # default <router>-headless
    assert created.outs["error"] == ""
    fake.put(endpoint_slice("qwen-a", [endpoint("qwen-0", "10.0.1.1"), endpoint("qwen-1", "10.0.1.2")], service="qwen"),
             model_pod("qwen-1"))
    refreshed = provider.read(created.id, created.outs)
    assert refreshed.outs["targets"]["models"]["qwen"] == ["qwen-0", "qwen-1"]
    assert refreshed.outs["targets"]["revision"] != created.outs["targets"]["revision"]
    assert refreshed.inputs == PROPS


def test_refresh_follows_the_router_pods_too():
    fake = cluster()
    provider = RouterTargetsProvider(connect=lambda target: fake.clients())
    created = provider.create({**PROPS, "router_service": HEADLESS})
    fake.put(router_slice("router-a", [endpoint("llm-router-0", "10.0.3.1"), endpoint("llm-router-3", "10.0.3.4")]))
    refreshed = provider.read(created.id, created.outs)
    assert refreshed.outs["targets"]["routers"] == ["llm-router-0", "llm-router-3"]
    assert refreshed.outs["targets"]["revision"] != created.outs["targets"]["revision"]


def test_a_failed_refresh_reports_the_error_not_the_old_targets():
    fake = cluster()
    provider = RouterTargetsProvider(connect=lambda target: fake.clients())
    created = provider.create(dict(PROPS))
    fake.fail_always("list_namespaced_pod", lambda: api_error(403))
    refreshed = provider.read(created.id, created.outs)
    assert refreshed.outs["targets"] is None
    assert "could not be read" in refreshed.outs["error"] and "403" in refreshed.outs["error"]


def test_diff_only_when_the_fronted_services_change():
    provider = RouterTargetsProvider()
    outs = {**PROPS, "targets": {"count": 1}, "observed_at": "then", "error": ""}
    assert not provider.diff("id", outs, dict(PROPS)).changes
    assert provider.diff("id", outs, {**PROPS, "services": {"llama": "llama"}}).changes
