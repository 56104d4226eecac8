"""RouterTargets provider and `python -m components targets`: the backend router's target
computation over the fronted models' EndpointSlices, read in one call."""

from __future__ import annotations

import io
import json

from fakes import NS, FakeCluster, api_error, endpoint, endpoint_slice

from components.config import load_stack_config
from providers import kube, status_cli
from providers.router_targets import RouterTargetsProvider, read_router_targets, service_selector

SERVICES = {"llama": "llama", "qwen": "qwen"}
PROPS = {"router": "llm-router", "namespace": NS, "services": SERVICES, "kubeconfig": "", "context": ""}


def slices() -> list[dict]:
    return [
        endpoint_slice("llama-a", [endpoint("llama-0", "10.0.0.1"), endpoint("llama-1", "10.0.0.2", ready=False)], service="llama"),
        endpoint_slice("llama-b", [endpoint("llama-0", "10.0.0.1"), endpoint("llama-2", "10.0.0.3")], service="llama"),
        endpoint_slice("qwen-a", [endpoint("qwen-0", "10.0.1.1")], service="qwen"),
        endpoint_slice("other-a", [endpoint("other-0", "10.0.2.1")], service="other"),
    ]


def test_the_selector_names_every_fronted_service_once():
    assert service_selector({"a": "svc-b", "b": "svc-a", "c": "svc-a"}) == "kubernetes.io/service-name in (svc-a,svc-b)"


def test_targets_per_model_in_one_call_other_services_ignored():
    cluster = FakeCluster().put(*slices())
    targets = read_router_targets(cluster.clients(), NS, SERVICES)
    assert targets.as_outputs()["models"] == {"llama": ["llama-0", "llama-2"], "qwen": ["qwen-0"]}
    assert targets.count == 3
    assert cluster.count("list_namespaced_endpoint_slice") == 1


def test_create_records_targets_and_refresh_follows_scaling():
    cluster = FakeCluster().put(*slices())
    provider = RouterTargetsProvider(connect=lambda target: cluster.clients())
    created = provider.create(dict(PROPS))
    assert created.outs["targets"]["models"]["qwen"] == ["qwen-0"]
    assert created.outs["error"] == ""
    cluster.put(endpoint_slice("qwen-a", [endpoint("qwen-0", "10.0.1.1"), endpoint("qwen-1", "10.0.1.2")], service="qwen"))
    refreshed = provider.read(created.id, created.outs)
    assert refreshed.outs["targets"]["models"]["qwen"] == ["qwen-0", "qwen-1"]
    assert refreshed.outs["targets"]["revision"] != created.outs["targets"]["revision"]
    assert refreshed.inputs == PROPS


def test_a_failed_refresh_reports_the_error_not_the_old_targets():
    cluster = FakeCluster().put(*slices())
    provider = RouterTargetsProvider(connect=lambda target: cluster.clients())
    created = provider.create(dict(PROPS))
    cluster.fail_always("list_namespaced_endpoint_slice", lambda: api_error(403))
    refreshed = provider.read(created.id, created.outs)
    assert refreshed.outs["targets"] is None
    assert "could not be read" in refreshed.outs["error"] and "403" in refreshed.outs["error"]


def test_diff_only_when_the_fronted_services_change():
    provider = RouterTargetsProvider()
    outs = {**PROPS, "targets": {"count": 1}, "observed_at": "then", "error": ""}
    assert not provider.diff("id", outs, dict(PROPS)).changes
    assert provider.diff("id", outs, {**PROPS, "services": {"llama": "llama"}}).changes


STACK = load_stack_config({
    "platform": {"namespace": NS, "sharedMemorySizeLimit": "1Gi"},
    "models": [{"name": name, "source": {"repo": f"acme/{name}"}, "resources": {"memory": "8Gi"}}
               for name in ("llama", "qwen")],
    "router": {"image": "registry.example.com/llm/router:1.0.0"},
})


def run_cli(monkeypatch, cluster, as_json=False):
    monkeypatch.setattr(kube, "connect", lambda target: cluster.clients())
    out = io.StringIO()
    return status_cli.print_router_targets(STACK, as_json=as_json, out=out), out.getvalue()


def test_cli_reports_each_fronted_model_and_exits_zero_when_all_have_targets(monkeypatch):
    code, text = run_cli(monkeypatch, FakeCluster().put(*slices()), as_json=True)
    report = json.loads(text)
    assert code == 0
    assert report["router"] == "llm-router"
    assert report["models"] == {"llama": ["llama-0", "llama-2"], "qwen": ["qwen-0"]}


def test_cli_exits_3_when_a_fronted_model_has_no_target(monkeypatch):
    code, text = run_cli(monkeypatch, FakeCluster().put(*slices()[:2]))
    assert code == 3
    assert "qwen" in text and "(none)" in text
