"""A CPU model in real pods from the rendered manifests, on the real node (issue 41 item 5).

`pulumi up` of a stack of its own deploys a CPU model (`gpus: 0`) placed on the real node by the
model's own `nodeSelector` and `tolerations`: the rendered puller (the `hf` image built here)
pulls a tiny model made on this machine (scripts/localmodel/make_model.py) from a Hub stand-in
(scripts/localmodel/hub_server.py) that listens on the node's bridge address only, the gate verifies
it on the real volume, and the vLLM CPU image serves it: the pod becomes Ready by its own probes
once the model has loaded, and answers a chat completion through the model's Service. The
containers run under the rendered security context (read from the kernel, not from the spec).

Runs in the `realnode` group (tests/tiers.py) on `<default>-realnode`, before the module that
stops it; run alone, it starts that cluster itself. The images are built once
(scripts/images/build.py; the vLLM one takes minutes cold) and imported into the node's
containerd when missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from scripts.localmodel.hub_server import HubServer
from testkit.engine_kit import tiny_model
from testkit.harness import Project
from tests.integration.test_real_node_cluster import LABEL, cluster_name, cluster_sh

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "scripts" / "images" / "build.py"
NODE_SOCKET = "/run/llm-serving-node/containerd.sock"  # scripts/node/real-node.sh SOCK
NODE_IP = "10.88.0.1"  # the real node's bridge address (scripts/node/real-node.sh NODE_IP)
PULLER_IMAGE = "localhost/llm-serving/hf:0.35.3"
NAMESPACE = "realpods"
MODEL = "tiny-cpu"
REPO_ID = "acme/tiny-cpu"
# The images this stack's pods run: the server, the puller (and the gate, the puller's image).
IMAGES = ("vllm-cpu", "hf")


def kubectl(kubeconfig: str, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], capture_output=True, text=True,
                            timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stdout}{result.stderr}")
    return result


def get_json(kubeconfig: str, *args: str) -> dict:
    return json.loads(kubectl(kubeconfig, *args, "-o", "json").stdout)


def real_node_with(images: tuple[str, ...]) -> tuple[str, str]:
    """The realnode cluster started with its node, and ``images`` (scripts/images/build.py names)
    in the node's containerd: (cluster name, kubeconfig path)."""
    name = cluster_name()
    started = cluster_sh(name, "start", "--real-node", timeout=1200)
    assert started.returncode == 0, started.stdout + started.stderr
    # Built once (cached by content), imported into the node's containerd if it lacks them.
    for command in (["build", *images], ["import", "--address", NODE_SOCKET, "--skip-present", *images]):
        result = subprocess.run([sys.executable, str(BUILD), *command], capture_output=True, text=True,
                                timeout=3600, check=False)
        assert result.returncode == 0, result.stderr[-3000:]
    return name, cluster_sh(name, "kubeconfig", timeout=30).stdout.strip()


@pytest.fixture(scope="module")
def realnode():
    yield real_node_with(IMAGES)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    model = tiny_model("0.32") / "model"
    with HubServer(tmp_path_factory.mktemp("hub"), host=NODE_IP) as server:
        server.commit(REPO_ID, {p.name: p for p in sorted(model.iterdir()) if p.is_file()})
        yield server


def stack_config(hub_url: str) -> dict:
    return {
        "platform": {
            "namespace": NAMESPACE,
            # The line of the vLLM CPU image built here (scripts/images/build.py vllm-cpu).
            "vllmRelease": "0.32",
            # The real node's local PVs (WaitForFirstConsumer: the puller, placed like the
            # server, binds one on the real node).
            "storageClassName": "local-node",
            "pullerImage": PULLER_IMAGE,
            "hfEndpoint": hub_url,
            "pendingTimeoutSeconds": 120,
            "pullTimeoutSeconds": 300,
            "startupTimeoutSeconds": 600,
            "sharedMemorySizeLimit": "1Gi",
            "preflight": {"enabled": False},
        },
        "models": [{
            "name": MODEL,
            "engine": "vllm",
            "source": {"repo": REPO_ID, "revision": "main"},
            "gpus": 0,
            "resources": {"cpu": "1", "memory": "5Gi"},
            "weights": {"size": "1Gi"},
            "nodeSelector": {LABEL: "true"},
            "tolerations": [{"key": LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            # A short drain: the default preStop (120 s) would hold the destroy that long; this
            # module sends no request across a stop.
            "disruption": {"drainSeconds": 5},
        }],
    }


@pytest.fixture(scope="module")
def deployed(realnode, hub, tmp_path_factory):
    _, kubeconfig = realnode
    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = kubeconfig
    try:
        project = Project(tmp_path_factory.mktemp("realpods") / "project", "realpods", stack_config(hub.url))
    finally:
        if saved is None:
            os.environ.pop("KUBECONFIG")
        else:
            os.environ["KUBECONFIG"] = saved
    project.namespace = NAMESPACE
    started = time.monotonic()
    try:
        project.up()
        yield kubeconfig, project, time.monotonic() - started
    finally:
        project.destroy()
        # The program keeps its namespace on destroy; the next run starts from none.
        kubectl(kubeconfig, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
                "--timeout=180s", timeout=200, check=False)


def server_pod(kubeconfig: str) -> dict:
    pods = get_json(kubeconfig, "-n", NAMESPACE, "get", "pods", "-l", f"app.kubernetes.io/name={MODEL}")["items"]
    servers = [p for p in pods if p["metadata"].get("ownerReferences", [{}])[0].get("kind") == "ReplicaSet"]
    assert len(servers) == 1, [p["metadata"]["name"] for p in pods]
    return servers[0]


def exec_in(kubeconfig: str, pod: str, container: str, *argv: str) -> str:
    return kubectl(kubeconfig, "-n", NAMESPACE, "exec", pod, "-c", container, "--", *argv, timeout=120).stdout


def test_the_cpu_model_serves_from_real_pods(deployed, hub):
    kubeconfig, _, up_seconds = deployed
    # The rendered puller fetched the weights from the stand-in on the bridge (from a pod).
    assert hub.gets("model.safetensors"), [r.path for r in hub.requests]
    pod = server_pod(kubeconfig)
    node = get_json(kubeconfig, "get", "node", pod["spec"]["nodeName"])
    assert node["metadata"]["labels"].get(LABEL) == "true", "the server must run on the real node"
    # Ready by its own probes: the kubelet ran them against a server that had loaded the model.
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "True", conditions
    created = pod["metadata"]["creationTimestamp"]
    print(f"pulumi up {up_seconds:.0f} s; server pod created {created}, "
          f"Ready {conditions['Ready']['lastTransitionTime']}")
    server = next(c for c in pod["spec"]["containers"] if c["name"] == "server")
    assert server["image"] == "docker.io/vllm/vllm-openai-cpu:v0.32.0", server["image"]
    # Ready only once the model had loaded: the kubelet saw the pod Ready no earlier than the
    # server logged that its API was up (after loading the weights and warming up).
    logs = kubectl(kubeconfig, "-n", NAMESPACE, "logs", "--timestamps", pod["metadata"]["name"], "-c", "server").stdout
    loaded = [line for line in logs.splitlines() if "Loading weights took" in line]
    up = [line for line in logs.splitlines() if "Application startup complete" in line]
    assert loaded and up, logs[-3000:]
    up_at = datetime.fromisoformat(up[0].split()[0].replace("Z", "+00:00")).replace(microsecond=0)
    ready_at = datetime.fromisoformat(conditions["Ready"]["lastTransitionTime"].replace("Z", "+00:00"))
    assert ready_at >= up_at, (ready_at, up_at)
    print(f"pod created {created} -> Ready {ready_at.isoformat()} "
          f"({(ready_at - datetime.fromisoformat(created.replace('Z', '+00:00'))).total_seconds():.0f} s)")

    # A chat completion through the model's Service, from the host: its ClusterIP, which
    # kube-proxy's rules send to the pod on the bridge.
    service = get_json(kubeconfig, "-n", NAMESPACE, "get", "service", MODEL)
    port = service["spec"]["ports"][0]["port"]
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "1+1="}],
                       "max_tokens": 8, "temperature": 0})
    answer = subprocess.run(["curl", "-sS", "--max-time", "120", "-H", "Content-Type: application/json",
                             "-d", body, f"http://{service['spec']['clusterIP']}:{port}/v1/chat/completions"],
                            capture_output=True, text=True, timeout=150, check=False)
    assert answer.returncode == 0, answer.stderr
    reply = json.loads(answer.stdout)
    assert reply["choices"][0]["message"]["content"], reply
    print(f"answer: {reply['choices'][0]['message']['content']!r}")


# Run in the server container by its own python: what the kernel says about pid 1 (the server),
# whether its root is mounted read-only, and who owns the weights on the volume and can read them.
INSPECT = """
import json, os, sys
status = dict(l.split(":", 1) for l in open("/proc/1/status").read().splitlines() if ":" in l)
# The root's mount options (mountinfo field 6): "ro" when the kubelet made it read-only.
root_options = next(l.split()[5] for l in open("/proc/self/mountinfo") if l.split()[4] == "/").split(",")
files = []
for d, _, names in os.walk(sys.argv[1]):
    for n in names:
        p = os.path.join(d, n); st = os.stat(p)
        files.append({"path": p, "uid": st.st_uid, "gid": st.st_gid, "readable": os.access(p, os.R_OK)})
print(json.dumps({"uid": status["Uid"].split()[0], "gid": status["Gid"].split()[0],
                  "groups": status["Groups"].split(), "capeff": status["CapEff"].strip(),
                  "nonewprivs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
                  "root_read_only": "ro" in root_options, "files": files}))
"""


def test_the_pods_run_under_the_rendered_security_context(deployed):
    kubeconfig, _, _ = deployed
    pod = server_pod(kubeconfig)
    server = next(c for c in pod["spec"]["containers"] if c["name"] == "server")
    rendered = {**pod["spec"].get("securityContext", {}), **server.get("securityContext", {})}
    mount = next(m for m in server["volumeMounts"] if m["mountPath"] == "/model-store")
    seen = json.loads(exec_in(kubeconfig, pod["metadata"]["name"], "server", "python3", "-c", INSPECT,
                              mount["mountPath"]))
    assert (int(seen["uid"]), int(seen["gid"])) == (rendered["runAsUser"], rendered["runAsGroup"]), seen
    assert int(seen["capeff"], 16) == 0, f"capabilities left: {seen['capeff']}"
    assert seen["nonewprivs"] == "1" and seen["seccomp"] == "2", seen  # 2: a seccomp filter
    assert seen["root_read_only"] == rendered.get("readOnlyRootFilesystem", False), seen
    # The puller wrote the weights as its uid on the real volume; the server reads them as its own.
    job = get_json(kubeconfig, "-n", NAMESPACE, "get", "jobs")["items"]
    assert len(job) == 1 and job[0]["status"].get("succeeded") == 1, job
    puller_uid = job[0]["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    weights = [f for f in seen["files"] if f["path"].endswith(".safetensors")]
    assert weights, seen["files"]
    for file in weights:
        assert file["uid"] == puller_uid and file["readable"], file
