"""The real node beside the simulated GPUs (issue 41 item 1), on a cluster of its own.

`scripts/cluster/cluster.sh start --real-node` joins a real kubelet, kube-proxy, containerd,
CoreDNS and a NetworkPolicy enforcer on this machine to a simulated cluster (scripts/node/). The
node is one per machine, so this module runs in the test command's `realnode` group
(tests/tiers.py) on the cluster `<default>-realnode`, which the group starts with the node; run
alone, the module starts that cluster itself. Its last test stops the cluster and checks that the
host is left as it was: no process, mount, network namespace, interface, iptables chain or ipset.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "scripts" / "cluster" / "cluster.sh"
LABEL = "llm-serving.dev/real-node"
TOOLCHAIN_ROOT = Path(os.environ.get("LLM_SERVING_TOOLCHAIN_DIR", Path.home() / ".cache" / "llm-serving-toolchain"))
# Where the node keeps what it mounts (scripts/node/real-node.sh: STATE, RUN, CONTAINERD_ROOT).
NODE_DIRS = ("/run/llm-serving-node/", f"{TOOLCHAIN_ROOT}/real-node/")
BRIDGE = "llmsrv0"
NODE_PROCESSES = {"kubelet", "kube-proxy", "containerd", "containerd-shim", "coredns", "kube-router", "pause"}
CHAINS = re.compile(r"^(KUBE-|CNI-|LLM-SERVING-NODE-)")
IPSETS = re.compile(r"^(inet6:)?(KUBE-|kube-router-)")


def cluster_name() -> str:
    name = os.environ.get("LLM_SERVING_CLUSTER", "llm-serving")
    return name if name.endswith("-realnode") else f"{name}-realnode"


def cluster_sh(cluster: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLM_SERVING_CLUSTER": cluster}
    for own in ("LLM_SERVING_KUBECONFIG", "LLM_SERVING_LWS_WEBHOOK_PORT", "LLM_SERVING_LWS_HEALTH_PORT"):
        env.pop(own, None)  # the default cluster's, not this one's
    return subprocess.run(["bash", str(CLUSTER_SH), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def cluster():
    name = cluster_name()
    started = cluster_sh(name, "start", "--real-node", timeout=1200)
    assert started.returncode == 0, started.stdout + started.stderr
    yield name
    cluster_sh(name, "stop", timeout=300)  # a no-op once test_stop_leaves_nothing_behind ran


def kubectl_json(cluster: str, *args: str) -> dict:
    kubeconfig = cluster_sh(cluster, "kubeconfig", timeout=30).stdout.strip()
    out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args, "-o", "json"], capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_the_real_node_is_run_by_its_kubelet_and_the_fake_ones_by_kwok(cluster):
    nodes = kubectl_json(cluster, "get", "nodes")["items"]
    real = [n for n in nodes if n["metadata"]["labels"].get(LABEL) == "true"]
    fake = [n for n in nodes if n["metadata"].get("annotations", {}).get("kwok.x-k8s.io/node") == "fake"]
    assert len(real) == 1 and len(fake) >= 3, [n["metadata"]["name"] for n in nodes]
    node = real[0]
    info = node["status"]["nodeInfo"]
    # A kubelet of the control plane's version, on Debian's containerd, not KWOK's made-up status.
    versions = (REPO / "scripts" / "toolchain" / "versions.sh").read_text()
    k8s = re.search(r"^K8S_VERSION=(\S+)", versions, re.M).group(1)
    assert info["kubeletVersion"] == k8s and info["containerRuntimeVersion"].startswith("containerd://1.6"), info
    ready = {c["type"]: c for c in node["status"]["conditions"]}["Ready"]
    assert ready["status"] == "True" and ready["reason"] == "KubeletReady", ready
    assert "simulated" not in ready["message"], ready  # the KWOK stage's message: KWOK played it
    assert {"key": LABEL, "value": "true", "effect": "NoSchedule"} in node["spec"].get("taints", [])
    for each in fake:
        assert each["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://2.0.0", each["metadata"]["name"]


def test_verify_proves_a_real_pod(cluster):
    result = cluster_sh(cluster, "verify", timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    for proof in ("Ready by its HTTP probe in a containerd container", "answers on its pod IP",
                  "resolves to", "refuses client-denied and admits client-allowed", "[real-node verify] verify passed"):
        assert proof in out, out


def test_a_second_cluster_is_refused_the_real_node(cluster):
    other = f"{cluster}-2"
    result = cluster_sh(other, "start", "--real-node", timeout=120)
    assert result.returncode != 0
    assert f"the real node runs for cluster '{cluster}' (one per machine:" in result.stderr, result.stderr
    clusters = subprocess.run(["kwokctl", "get", "clusters"], capture_output=True, text=True, timeout=30,
                              env={**os.environ, "KWOK_WORKDIR": str(TOOLCHAIN_ROOT / "kwok")})
    assert other not in clusters.stdout.split(), "the refused start created its cluster anyway"
    owner = subprocess.run(["bash", str(REPO / "scripts" / "node" / "real-node.sh"), "owner"],
                           capture_output=True, text=True, timeout=30)
    assert owner.stdout.strip() == cluster


def leftovers() -> list[str]:
    """What the real node puts on the host, listed without its own scripts. Processes by name, of
    the node's own (their command names its directories: another containerd may run here), and
    any process in a pod's cgroup."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            cgroups = (proc / "cgroup").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "/kubepods" in cgroups:
            found.append(f"process {proc.name} {comm} in a pod's cgroup")
        elif (comm in NODE_PROCESSES or comm.startswith("containerd-shim")) and any(d in cmdline for d in NODE_DIRS):
            found.append(f"process {proc.name} {comm}")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point.startswith(NODE_DIRS):
            found.append(f"mount {point}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    for name in (line.split()[0] for line in netns.splitlines() if line.startswith("cni-")):
        addresses = subprocess.run(["ip", "netns", "exec", name, "ip", "-4", "-o", "addr", "show"],
                                   capture_output=True, text=True).stdout
        if " inet 10.88.0." in addresses:  # the node's pod range: not another CRI's namespace
            found.append(f"netns {name}")
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0:
        found.append(f"interface {BRIDGE}")
    for save in ("iptables-save", "ip6tables-save"):
        rules = subprocess.run([save], capture_output=True, text=True, check=True).stdout
        found += [f"{save} chain {line[1:].split()[0]}" for line in rules.splitlines()
                  if line.startswith(":") and CHAINS.match(line[1:])]
    sets = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=True).stdout
    found += [f"ipset {name}" for name in sets.split() if IPSETS.match(name)]
    return found


SLEEPER = """
apiVersion: v1
kind: Pod
metadata: {name: sleeper, namespace: default}
spec:
  nodeSelector: {llm-serving.dev/real-node: "true"}
  tolerations: [{key: llm-serving.dev/real-node, operator: Exists, effect: NoSchedule}]
  terminationGracePeriodSeconds: 30
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: main
    image: llm-serving.local/node-check:1
    imagePullPolicy: Never
    command: [/bin/busybox, sleep, "600"]
    securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: sleeper-closed, namespace: default}
spec:
  podSelector: {}
  policyTypes: [Ingress]
"""


def test_stop_leaves_nothing_behind(cluster):
    # A pod still running when `stop` comes (its sandbox, shim, mounts and network namespace too),
    # and a NetworkPolicy (kube-router's chains and ipsets).
    kubeconfig = cluster_sh(cluster, "kubeconfig", timeout=30).stdout.strip()
    kubectl = ["kubectl", "--kubeconfig", kubeconfig]
    subprocess.run([*kubectl, "apply", "-f", "-"], input=SLEEPER, text=True, check=True, timeout=60)
    subprocess.run([*kubectl, "wait", "--for=condition=Ready", "pod/sleeper", "--timeout=90s"], check=True, timeout=120)
    # kube-router makes its ipsets for the policy within a sync (bounded wait).
    deadline = time.monotonic() + 60
    while not any(line.startswith("ipset ") for line in leftovers()) and time.monotonic() < deadline:
        time.sleep(1)
    running = leftovers()
    # The listing sees the node while it runs (else an empty list after stop would prove nothing).
    for piece in ("kubelet", "kube-proxy", "containerd", "containerd-shim", "coredns", "kube-router"):
        assert any(line.startswith("process ") and line.endswith(f" {piece}") for line in running), (piece, running)
    assert any(line.endswith(" pause in a pod's cgroup") for line in running), running
    assert any(line.endswith(" busybox in a pod's cgroup") for line in running), running
    assert any(line.startswith("mount /run/llm-serving-node/") for line in running), running
    assert any(line.startswith("netns cni-") for line in running), running
    assert f"interface {BRIDGE}" in running
    assert any(line.startswith("iptables-save chain KUBE-") for line in running), running
    assert any(line.startswith("ipset ") for line in running), running
    stopped = cluster_sh(cluster, "stop", timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert leftovers() == []
