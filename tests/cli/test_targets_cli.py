"""`python -m components targets`: the router's topology, its pods and per fronted model the pods
a pylon serves, read live as the RouterTargets provider reads them; exit 0 only when reachable."""

from __future__ import annotations

import io
import json

from components.config import load_stack_config
from components.targets_cli import print_router_targets
from providers import kube
from tests.support.fakes import NS, FakeCluster
from tests.support.router_world import cluster, model_pod, pods, slices

STACK = load_stack_config({
    "platform": {"namespace": NS, "sharedMemorySizeLimit": "1Gi"},
    "models": [{"name": name, "source": {"repo": f"acme/{name}"}, "resources": {"memory": "8Gi"}}
               for name in ("llama", "qwen")],
    "router": {"image": "registry.example.com/llm/router:1.0.0", "workload": {"kind": "StatefulSet"}},
})


def run_cli(monkeypatch, fake, as_json=False):
    monkeypatch.setattr(kube, "connect", lambda target: fake.clients())
    out = io.StringIO()
    return print_router_targets(STACK, as_json=as_json, out=out), out.getvalue()


def test_cli_reports_topology_router_pods_and_models_and_exits_zero_when_reachable(monkeypatch):
    code, text = run_cli(monkeypatch, cluster(), as_json=True)
    report = json.loads(text)
    assert code == 0
    assert report["router"] == "llm-router"
    assert report["topology"].startswith("StatefulSet")
    assert report["routers"] == ["llm-router-0"]
    assert report["models"] == {"llama": ["llama-0", "llama-2"], "qwen": ["qwen-0"]}


def test_cli_exits_3_when_a_fronted_model_has_no_pylon_served_pod(monkeypatch):
    fake = FakeCluster().put(*slices(), model_pod("llama-0"), model_pod("qwen-0", pylon=False))
    code, text = run_cli(monkeypatch, fake)
    assert code == 3
    assert "qwen" in text and "(none)" in text and "StatefulSet" in text


def test_cli_exits_3_without_a_router_pod(monkeypatch):
    fake = FakeCluster().put(*slices()[:3], *pods())
    code, text = run_cli(monkeypatch, fake)
    assert code == 3 and "router pods (llm-router-headless): (none)" in text
