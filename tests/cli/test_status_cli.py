"""`python -m components status`: the providers' projection, live, as a table or JSON."""

from __future__ import annotations

import io
import json

from components import status_cli
from components.config import load_stack_config
from providers import kube
from tests.support.fakes import NS, FakeCluster, container_status, deployment, pod, ready_server_pod, ready_slices

STACK = load_stack_config({
    "platform": {"namespace": NS, "sharedMemorySizeLimit": "1Gi"},
    "models": [{"name": "llama", "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}, "resources": {"memory": "8Gi"}}],
})


def run(monkeypatch, cluster, as_json=False):
    monkeypatch.setattr(kube, "connect", lambda target: cluster.clients())
    out = io.StringIO()
    code = status_cli.print_status(STACK, as_json=as_json, out=out)
    return code, out.getvalue()


def test_a_serving_model_is_ready_and_exits_zero(monkeypatch):
    cluster = FakeCluster().put(deployment("llama", ready=1), ready_server_pod("llama-abc"), *ready_slices(["llama-abc"]))
    code, text = run(monkeypatch, cluster)
    assert code == 0
    assert text.splitlines()[1].split()[:4] == ["llama", "READY", "1", "1"]


def test_json_carries_state_reason_and_targets(monkeypatch):
    cluster = FakeCluster().put(deployment("llama", ready=1), ready_server_pod("llama-abc"), *ready_slices(["llama-abc"]))
    code, text = run(monkeypatch, cluster, as_json=True)
    report = json.loads(text)["llama"]
    assert (report["state"], report["targets"]) == ("READY", ["llama-abc"])


def test_a_crash_loop_is_reported_with_its_reason_and_exit_3(monkeypatch):
    crashing = pod("llama-abc", containers=[container_status(waiting={"reason": "CrashLoopBackOff"}, restarts=5)])
    cluster = FakeCluster().put(deployment("llama"), crashing)
    code, text = run(monkeypatch, cluster, as_json=True)
    assert code == 3
    assert json.loads(text)["llama"]["state"] == "ERROR"


def test_an_unreachable_cluster_is_unknown_not_a_guess(monkeypatch):
    def refuse(target):
        raise kube.ClusterUnreachable("connection refused")

    monkeypatch.setattr(kube, "connect", refuse)
    out = io.StringIO()
    assert status_cli.print_status(STACK, out=out) == 3
    assert "UNKNOWN" in out.getvalue()


SLEEPY = load_stack_config({
    "platform": {"namespace": NS, "sharedMemorySizeLimit": "1Gi", "metrics": {"enabled": True}},
    "models": [{"name": "llama", "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}, "resources": {"memory": "8Gi"},
                "weights": {"accessMode": "ReadWriteMany"},
                "autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 2}}],
    "router": {"image": "nvcr.io/nvidia/llm-request-router:0.16.2", "gateway": {"hold": {"timeoutSeconds": 300}}},
})


def test_a_model_asleep_as_configured_is_scaled_to_zero_and_exits_zero(monkeypatch):
    monkeypatch.setattr(kube, "connect", lambda target: FakeCluster().put(deployment("llama", replicas=0, ready=0)).clients())
    out = io.StringIO()
    assert status_cli.print_status(SLEEPY, out=out) == 0
    assert out.getvalue().splitlines()[1].split()[:2] == ["llama", "SCALED_TO_ZERO"]
    # The same Deployment at zero for a model that may not sleep is not serving: exit 3.
    code, text = run(monkeypatch, FakeCluster().put(deployment("llama", replicas=0, ready=0)))
    assert code == 3 and text.splitlines()[1].split()[:2] == ["llama", "PENDING"]
