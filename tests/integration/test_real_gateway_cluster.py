"""The whole path in real pods on the real node: gateway, router, pylon and the vLLM CPU server
(issue 41 item 5: API keys under an enforcing NetworkPolicy, and a wake from zero).

One stack of its own (namespace ``realwake``): the CPU model of test_real_pods_cluster.py (the
same tiny model from the same Hub stand-in, pulled by the rendered puller) at
`autoscaling.minReplicas: 0`, fronted by the router of the public Stargate build
(`release: public-0.4`) with its pylon sidecar and by the gateway with API keys, with
`platform.networkPolicy` on; router and gateway are placed on the real node by
`router.nodeSelector`/`tolerations` and `router.gateway.nodeSelector`/`tolerations`. Every image is
one built on this machine (scripts/images/build.py). The node runs kube-router's policy
controller, so the rendered NetworkPolicies hold here, as they do on a cluster whose CNI enforces
them.

- Keys: a chat completion with a key, through the gateway, is answered by the real engine (so the
  gateway's call to the router's port passes the policy); a busybox pod of the same namespace,
  which no policy admits, reaches the gateway's port and is refused on the router's.
- Wake: KEDA's real operator (a host process, testkit/keda_operator.py, as in
  test_autoscaling_on_cluster.py; fixtures in conftest.py) scales the idle model to zero; a streaming request to the
  gateway is held, the held count (read from the real gateway's /metrics by a Prometheus
  stand-in) wakes it, and the new pod's engine answers it once its pylon has registered.

The weights volume is ReadWriteMany (autoscaling refuses ReadWriteOnce: a second replica on
another node could not attach it): a `local` PV of the node's disk declared RWX, standing in for
the shared storage a real cluster would give it; every pod of the model runs on the one node.

Runs in the `realnode` group (tests/tiers.py), before the module that stops the cluster; prints
what it measured (pod created -> Ready, a wake's first token and a warm one's, docs/10-benchmarks.md).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from datetime import datetime

import pytest

from testkit.harness import Project
from testkit.ports import host_ipv4
from testkit.prometheus_standin import PrometheusStandIn
from tests.integration import test_real_pods_cluster as real_pods
from tests.integration.test_real_node_cluster import LABEL
from tests.integration.test_real_pods_cluster import MODEL, get_json, kubectl, real_node_with, stack_config
from tests.support.fixture_crds import wait_for
from tests.support.keda import KEDA_CRD

pytestmark = pytest.mark.integration

hub = real_pods.hub  # the Hub stand-in with the tiny model, a fixture of this module too

NAMESPACE = "realwake"
# What this stack's pods run: server, puller and gate, router, pylon, gateway, and the prober.
IMAGES = ("vllm-cpu", "hf", "router", "pylon", "nginx", "busybox")
ROUTER = "llm-router"
GATEWAY = f"{ROUTER}-gateway"
KEYS_SECRET = "gateway-keys"
TENANT = "team-a"
STORAGE_CLASS = "realwake-rwx"
POLL_SECONDS = 5
IDLE_SECONDS = 60  # the least idleSeconds allows; a never-active model sleeps at KEDA's first look
# A cold start of the CPU server on this machine takes a minute or two; the hold outlasts it.
HOLD_SECONDS = 600
ON_THE_NODE = {"nodeSelector": {LABEL: "true"},
               "tolerations": [{"key": LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}
SERVER_PODS = f"app.kubernetes.io/name={MODEL},app.kubernetes.io/component=server"


def wake_config(hub_url: str, prometheus: str) -> dict:
    """test_real_pods_cluster.py's stack, in this namespace, asleep when idle, behind router and gateway."""
    config = stack_config(hub_url)
    config["platform"].update({
        "namespace": NAMESPACE,
        # The test makes the namespace, so the keys Secret is there before the gateway's pods.
        "createNamespace": False,
        "storageClassName": STORAGE_CLASS,
        # The 2-core node holds one CPU model at a time: this one's pods may wait for another's
        # to go (the group's modules run one after another; a shared cluster's need not).
        "pendingTimeoutSeconds": 900,
        # Only the router may reach the model pods, only the gateway the router's HTTP port.
        "networkPolicy": {"enabled": True, "allowFrom": []},
        "autoscaling": {"requireModelMetrics": False, "prometheusAddress": prometheus,
                        "pollingIntervalSeconds": POLL_SECONDS},
    })
    (model,) = config["models"]
    model["weights"] = {"size": "1Gi", "accessMode": "ReadWriteMany"}
    model["autoscaling"] = {"enabled": True, "minReplicas": 0, "maxReplicas": 1, "idleSeconds": IDLE_SECONDS}
    config["router"] = {
        "name": ROUTER, "image": "localhost/llm-serving/stargate:0.4.0", "release": "public-0.4", "replicas": 1,
        "models": [MODEL], "workerAuth": {"mode": "open"}, **ON_THE_NODE,
        # NVCF's 500m request beside the server's whole CPU would not fit the 2-core node.
        "pylon": {"image": "nvcr.io/0651155215864979/ncp-dev/stargate-client:0.4.0",
                  "resources": {"cpu": "100m", "memory": "128Mi", "cpuLimit": "500m", "memoryLimit": "256Mi"}},
        "gateway": {"image": "docker.io/library/nginx:1.26.3", "replicas": 1, **ON_THE_NODE,
                    "apiKeys": {"secretName": KEYS_SECRET, "tenants": [{"name": TENANT}]},
                    "hold": {"timeoutSeconds": HOLD_SECONDS, "maxPerModel": 2, "maxTotal": 2}},
    }
    return config


@pytest.fixture(scope="module")
def realnode():
    """The realnode cluster with every image this stack runs; the processes this module starts
    (pulumi, KEDA's operator) and the KEDA fixtures' client talk to it."""
    name, kubeconfig = real_node_with(IMAGES)
    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = kubeconfig
    try:
        yield name, kubeconfig
    finally:
        if saved is None:
            os.environ.pop("KUBECONFIG")
        else:
            os.environ["KUBECONFIG"] = saved


@pytest.fixture(scope="module")
def kube(realnode):
    """The Kubernetes client on the realnode cluster (the KEDA fixtures take ``kube``)."""
    from kubernetes import client, config

    config.load_kube_config(realnode[1])
    return client


@pytest.fixture(scope="module", autouse=True)
def keda_crd_absent_at_the_end(kube):
    """Autouse: set up first and torn down last, after the stack is destroyed."""
    yield from KEDA_CRD.absent_until_installed(kube, "a real KEDA")


@pytest.fixture(scope="module")
def rwx_volume(realnode):
    """A StorageClass of this module and one `local` PV of it on the real node, ReadWriteMany."""
    _, kubeconfig = realnode
    directory = tempfile.mkdtemp(prefix="realwake-weights-")
    node = get_json(kubeconfig, "get", "nodes", "-l", f"{LABEL}=true")["items"][0]["metadata"]["name"]
    objects = [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": STORAGE_CLASS},
         "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{STORAGE_CLASS}-0"},
         "spec": {"storageClassName": STORAGE_CLASS, "capacity": {"storage": "2Gi"},
                  "accessModes": ["ReadWriteMany"], "persistentVolumeReclaimPolicy": "Retain",
                  "local": {"path": directory},
                  "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                      {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}},
    ]
    # One an interrupted run left is Released (and its path immutable): made anew.
    kubectl(kubeconfig, "delete", "pv", f"{STORAGE_CLASS}-0", "--ignore-not-found", "--wait=true", timeout=120)
    apply(kubeconfig, *objects)
    yield
    kubectl(kubeconfig, "delete", "pv", f"{STORAGE_CLASS}-0", "--ignore-not-found", "--wait=true", timeout=120, check=False)
    kubectl(kubeconfig, "delete", "storageclass", STORAGE_CLASS, "--ignore-not-found", check=False)
    shutil.rmtree(directory, ignore_errors=True)


def apply(kubeconfig: str, *objects: dict) -> None:
    subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-"], check=True, capture_output=True,
                   text=True, timeout=60, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


class Gateway:
    """The deployed gateway: its ClusterIP (reached from the host through kube-proxy) and the held
    count its pod serves on /metrics (what the Prometheus stand-in answers KEDA with)."""

    def __init__(self):
        self.key, self.address, self.pod_ip = "", "", ""

    def held(self) -> float:
        connection = http.client.HTTPConnection(self.pod_ip, 8081, timeout=5)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(f'gateway_held_requests{{model="{MODEL}"}}'))

    def chat(self, stream: bool, timeout: float = HOLD_SECONDS + 60) -> tuple[int, float | None, str]:
        """(status, seconds to the first token, the answer's text): a chat completion with the key."""
        body = json.dumps({"model": MODEL, "stream": stream, "max_tokens": 8, "temperature": 0,
                           "messages": [{"role": "user", "content": "1+1="}]})
        started = time.monotonic()
        connection = http.client.HTTPConnection(*self.address.split(":"), timeout=timeout)
        connection.request("POST", "/v1/chat/completions", body,
                           {"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"})
        reply = connection.getresponse()
        if not stream or reply.status != 200:
            text = reply.read().decode()
            return reply.status, time.monotonic() - started, text
        first, text = None, ""
        for line in reply:
            text += line.decode()
            if first is None and line.startswith(b"data: {"):
                choices = json.loads(line[6:]).get("choices") or [{}]
                if (choices[0].get("delta") or {}).get("content"):
                    first = time.monotonic() - started
        return reply.status, first, text


@pytest.fixture(scope="module")
def gateway():
    return Gateway()


@pytest.fixture(scope="module")
def prometheus(gateway):
    with PrometheusStandIn({"gateway_held_requests": gateway.held, "gateway_requests_total": lambda: 0,
                            "vllm:num_requests_waiting": lambda: 0}, host="0.0.0.0") as standin:
        yield standin


@pytest.fixture(scope="module")
def deployed(realnode, hub, keda_crd_installed, keda_operator, rwx_volume, prometheus, gateway, tmp_path_factory):
    """The stack up, its model's first pod Ready (no KEDA operator runs yet: the Deployment keeps
    the API's one replica). Destroyed while KEDA's operator still runs (it holds a finalizer on
    the ScaledObject once it has seen it)."""
    _, kubeconfig = realnode
    kubectl(kubeconfig, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=180s",
            timeout=200, check=False)  # what an interrupted run left
    key = secrets.token_hex(24)
    apply(kubeconfig,
          {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
          {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KEYS_SECRET, "namespace": NAMESPACE},
           "stringData": {"keys": f"{hashlib.sha256(key.encode()).hexdigest()} {TENANT}\n"}})
    project = Project(tmp_path_factory.mktemp("realwake") / "project", "realwake",
                      wake_config(hub.url, f"http://{host_ipv4()}:{prometheus.port}"))
    project.namespace = NAMESPACE
    try:
        project.up()
        wait_for(lambda: ready_servers(kubeconfig) == 1, 600, "the model's first pod to be Ready")
        service = get_json(kubeconfig, "-n", NAMESPACE, "get", "service", GATEWAY)
        gateway.key = key
        gateway.address = f"{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
        (pod,) = get_json(kubeconfig, "-n", NAMESPACE, "get", "pods", "-l",
                          f"app.kubernetes.io/name={ROUTER},app.kubernetes.io/component=gateway")["items"]
        gateway.pod_ip = pod["status"]["podIP"]
        yield kubeconfig, project
    finally:
        project.destroy()
        kubectl(kubeconfig, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
                "--timeout=180s", timeout=200, check=False)


def servers(kubeconfig: str) -> list[dict]:
    return get_json(kubeconfig, "-n", NAMESPACE, "get", "pods", "-l", SERVER_PODS)["items"]


def ready_servers(kubeconfig: str) -> int:
    return sum(1 for pod in servers(kubeconfig) if any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])))


def startup(pod: dict) -> str:
    """When the pod was created, scheduled (it may wait for the node's CPU) and Ready, as printed."""
    def at(stamp: str) -> datetime:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    conditions = {c["type"]: at(c["lastTransitionTime"]) for c in pod["status"]["conditions"]}
    created = at(pod["metadata"]["creationTimestamp"])
    return (f"pod created {created:%H:%M:%S} -> scheduled +{(conditions['PodScheduled'] - created).total_seconds():.0f} s "
            f"-> Ready +{(conditions['Ready'] - created).total_seconds():.0f} s")


# --- API keys under the enforcing policy --------------------------------------------------------

def prober(kubeconfig: str) -> str:
    """A busybox pod of the namespace on the real node, with labels no policy admits."""
    name = "prober"
    apply(kubeconfig, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE,
                                                        "labels": {"app.kubernetes.io/name": "prober"}},
        "spec": {**ON_THE_NODE, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "prober", "image": "docker.io/library/busybox:1.37.0",
                                 "command": ["sleep", "3600"],
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                               "limits": {"cpu": "100m", "memory": "32Mi"}},
                                 "securityContext": {"allowPrivilegeEscalation": False,
                                                     "readOnlyRootFilesystem": True,
                                                     "capabilities": {"drop": ["ALL"]}}}]}})
    kubectl(kubeconfig, "-n", NAMESPACE, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout=150)
    return name


def call_from(kubeconfig: str, pod: str, address: str) -> subprocess.CompletedProcess:
    """An HTTP GET of /v1/models from ``pod`` to ``address`` (ip:port) with busybox's nc (its
    wget crashes on name lookups, docs/images.md); a connection the policy drops never answers."""
    host, port = address.split(":")
    return kubectl(kubeconfig, "-n", NAMESPACE, "exec", pod, "--", "sh", "-c",
                   f"printf 'GET /v1/models HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' | nc -w 5 {host} {port}",
                   timeout=60, check=False)


def test_with_keys_only_the_gateway_reaches_the_router_and_the_real_engine_answers(deployed, gateway):
    kubeconfig, _ = deployed
    for role in ("router", "gateway"):
        (pod,) = get_json(kubeconfig, "-n", NAMESPACE, "get", "pods", "-l",
                          f"app.kubernetes.io/name={ROUTER},app.kubernetes.io/component={role}")["items"]
        node = get_json(kubeconfig, "get", "node", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"].get(LABEL) == "true", f"the {role} must run on the real node"
    (server,) = servers(kubeconfig)
    print(f"the model's first {startup(server)}")

    # Through the gateway, with the key: the router's HTTP port admits the gateway's call, and the
    # real engine answers (a chat.completion of the model, folded from the engine's stream).
    status, _, text = gateway.chat(stream=False)
    assert status == 200, text
    reply = json.loads(text)
    assert reply["model"] == MODEL and reply["choices"][0]["message"]["content"], reply
    saved, gateway.key = gateway.key, "not-a-key"
    try:
        status, _, text = gateway.chat(stream=False, timeout=30)
    finally:
        gateway.key = saved
    assert status == 401, text

    # A pod beside the gateway: its network works (the gateway's port answers it, 401 without a
    # key), and the router's HTTP port, which would take its own x-model and x-routing-key, is
    # closed to it by the policy the node enforces.
    pod = prober(kubeconfig)
    router = get_json(kubeconfig, "-n", NAMESPACE, "get", "service", ROUTER)
    router_address = f"{router['spec']['clusterIP']}:8000"
    to_gateway = call_from(kubeconfig, pod, gateway.address)
    assert to_gateway.stdout.startswith("HTTP/1.1 401"), to_gateway.stdout + to_gateway.stderr
    to_router = call_from(kubeconfig, pod, router_address)
    assert to_router.returncode != 0 and not to_router.stdout, (
        f"the router's port answered a pod the policy does not admit: {to_router.stdout}{to_router.stderr}")


def router_models(kubeconfig: str) -> list[str]:
    router = get_json(kubeconfig, "-n", NAMESPACE, "get", "service", ROUTER)
    connection = http.client.HTTPConnection(router["spec"]["clusterIP"], 8000, timeout=5)
    connection.request("GET", "/v1/models")
    return json.loads(connection.getresponse().read())["model_ids"]


# --- scale to zero: a held request wakes the real engine ------------------------------------------

def test_the_model_sleeps_when_idle_and_a_held_request_wakes_the_real_engine(deployed, gateway, keda_operator, prometheus):
    kubeconfig, _ = deployed
    operator, log = keda_operator(NAMESPACE)

    def operator_alive(what: str) -> None:
        if operator.poll() is not None:
            pytest.fail(f"KEDA's operator exited while waiting for {what}:\n{log.read_text()[-3000:]}")

    def desired() -> int:
        return get_json(kubeconfig, "-n", NAMESPACE, "get", "deployment", MODEL)["spec"].get("replicas", 1)

    # Not yet active: KEDA scales it to zero at its first look, and the pod goes (its preStop wait).
    wait_for(lambda: desired() == 0, 60, "KEDA to scale the idle model to zero", stop=operator_alive)
    wait_for(lambda: not servers(kubeconfig), 120, "the model's pod to go")
    # and its pylon's registration with it: the router would take a request, not answer 404 (the
    # host may call the router's port: the policy controller admits the node's own addresses).
    wait_for(lambda: MODEL not in router_models(kubeconfig), 60, "the router to drop the model")

    # A streaming request while asleep: the router has no server for it, the gateway holds it and
    # counts it, KEDA reads the count (through the stand-in) and wakes the model.
    answers: dict = {}
    caller = threading.Thread(target=lambda: answers.update(wake=gateway.chat(stream=True)), daemon=True)
    caller.start()
    wait_for(lambda: gateway.held() == 1, 30, "the request to be held at the gateway")
    wait_for(lambda: desired() == 1, 3 * POLL_SECONDS + 30, "KEDA to wake the model on the held request",
             stop=operator_alive)
    assert any("gateway_held_requests" in query for query in prometheus.queries)
    caller.join(HOLD_SECONDS + 90)
    assert "wake" in answers, "the held request got no answer"
    status, wake_first, text = answers["wake"]
    assert status == 200 and wake_first is not None, text
    assert text.rstrip().endswith("data: [DONE]"), text[-2000:]

    # Answered by the engine of the pod the wake started (its access log has the request).
    (woken,) = servers(kubeconfig)
    logs = kubectl(kubeconfig, "-n", NAMESPACE, "logs", woken["metadata"]["name"], "-c", "server").stdout
    assert "POST /v1/chat/completions" in logs, logs[-3000:]
    assert gateway.held() == 0

    status, warm_first, text = gateway.chat(stream=True)
    assert status == 200 and warm_first is not None, text
    # The pylon registers once its engine answers, the kubelet marks the pod Ready at its next
    # probe: the first token can come a few seconds before the pod is Ready.
    wait_for(lambda: ready_servers(kubeconfig) == 1, 60, "the woken pod to be Ready")
    (woken,) = servers(kubeconfig)
    print(f"wake: {startup(woken)}; first token after a sleep "
          f"{wake_first:.1f} s, awake {warm_first * 1000:.0f} ms ({wake_first / warm_first:.0f}x); "
          f"KEDA polling every {POLL_SECONDS} s")
