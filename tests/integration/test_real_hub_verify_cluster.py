"""The gate verifies the bytes on the real volume (issue 41 item 5), for a Hub source.

A CPU model's rendered puller Job runs in real pods on the real node, from the `hf` image built
here, against a Hub stand-in on the node's bridge that serves `model.safetensors` with one byte
changed under the hub's true headers (a mirror or proxy altering bodies: ``HubServer.alter``).
`hf download` writes it (the client checks the length only); the Job's `verify` container hashes
it against the ETag the client recorded, removes it and fails; the Job's two retries fetch it
again and fail the same way. `pulumi up` fails at the weights gate with `source-corrupted` and
the file's name, nothing serves, and `python -m components status` says the same.

Runs in the `realnode` group (tests/tiers.py), before the module that stops the node; run alone
it starts that cluster itself (tests/integration/test_real_pods_cluster.py ``real_node_with``).
Only the `hf` image: the server never starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from scripts.localmodel.hub_server import HubServer
from testkit.hf_server import tiny_model_files
from tests.integration.test_real_node_cluster import LABEL
from tests.integration.test_real_pods_cluster import NODE_IP, PULLER_IMAGE, REPO, get_json, kubectl, project_on, real_node_with

pytestmark = pytest.mark.integration

NAMESPACE = "realverify"
MODEL = "tiny-verify"
REPO_ID = "acme/tiny-verify"
ALTERED = "model.safetensors"


@pytest.fixture(scope="module")
def realnode():
    yield real_node_with(("hf",))


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with HubServer(tmp_path_factory.mktemp("hub"), host=NODE_IP) as server:
        server.commit(REPO_ID, tiny_model_files())
        server.alter(ALTERED)
        yield server


def stack_config(hub_url: str) -> dict:
    return {
        "platform": {
            "namespace": NAMESPACE, "vllmRelease": "0.32", "storageClassName": "local-node",
            "pullerImage": PULLER_IMAGE, "hfEndpoint": hub_url, "pendingTimeoutSeconds": 120,
            "pullTimeoutSeconds": 300, "preflight": {"enabled": False},
        },
        "models": [{
            "name": MODEL, "engine": "vllm", "source": {"repo": REPO_ID, "revision": "main"}, "gpus": 0,
            "resources": {"cpu": "1", "memory": "5Gi"}, "weights": {"size": "1Gi"},
            "nodeSelector": {LABEL: "true"},
            "tolerations": [{"key": LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        }],
    }


@pytest.fixture(scope="module")
def failed_up(realnode, hub, tmp_path_factory):
    _, kubeconfig = realnode
    project = project_on(kubeconfig, tmp_path_factory.mktemp("realverify") / "project", "realverify", NAMESPACE,
                         stack_config(hub.url))
    started = time.monotonic()
    try:
        result = project.up(check=False)
        yield kubeconfig, project, result, time.monotonic() - started
    finally:
        project.destroy()
        kubectl(kubeconfig, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
                "--timeout=180s", timeout=200, check=False)


def test_an_altered_file_fails_the_gate_naming_it(failed_up, hub):
    kubeconfig, _, result, seconds = failed_up
    out = result.stdout + result.stderr
    print(f"`pulumi up` refused by the gate after {seconds:.0f} s")
    assert result.returncode != 0, out[-4000:]
    assert "reason: source-corrupted" in out, out[-6000:]
    assert f"weights files are not what the hub named: {ALTERED}(its " in out, out[-6000:]
    # Fetched on every attempt of the Job (backoffLimit 2: three pods), refused every time.
    assert len(hub.gets(ALTERED)) == 3, [r.path for r in hub.requests]
    (job,) = get_json(kubeconfig, "-n", NAMESPACE, "get", "jobs")["items"]
    assert any(c["type"] == "Failed" and c["status"] == "True" for c in job["status"]["conditions"]), job["status"]
    pods = get_json(kubeconfig, "-n", NAMESPACE, "get", "pods", "-l", f"batch.kubernetes.io/job-name={job['metadata']['name']}")
    for pod in pods["items"]:
        (puller,) = pod["status"]["initContainerStatuses"]
        (verify,) = pod["status"]["containerStatuses"]
        assert puller["state"]["terminated"]["exitCode"] == 0, puller
        assert verify["state"]["terminated"]["exitCode"] == 44, verify
        assert f"llm-serving: not the hub's files: {ALTERED}(" in verify["state"]["terminated"]["message"]
    # Nothing serves: the gate held the server back.
    deployments = get_json(kubeconfig, "-n", NAMESPACE, "get", "deployments")["items"]
    assert deployments == [], [d["metadata"]["name"] for d in deployments]


def test_status_names_the_file(failed_up):
    _, project, _, _ = failed_up
    result = subprocess.run([sys.executable, "-m", "components", "status", "--config", str(project.config_file),
                             "--json"], cwd=REPO, env=project.env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    status = json.loads(result.stdout)[MODEL]
    assert (status["state"], status["reason"]) == ("ERROR", "source-corrupted"), status
    assert f"not what the hub named: {ALTERED}(" in status["message"], status
