"""The commands that read the cluster name a missing kubeconfig (or context) and the fix.

Without a kubeconfig the Kubernetes client falls back to its in-cluster config and says only
"Service host/port is not set"; a newcomer who has not sourced scripts/env.sh must instead read
which file was looked for and what to do. Run as the newcomer would: a fresh process, a HOME
without ~/.kube, no KUBERNETES_SERVICE_HOST.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FIX = "`source scripts/env.sh`"


def run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "components", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**base, "HOME": str(home), **env})


def test_status_names_the_missing_kubeconfig_and_the_fix(tmp_path):
    missing = tmp_path / "nowhere" / "kubeconfig"
    result = run(tmp_path, "status", "--stack", "local", KUBECONFIG=str(missing))
    assert result.returncode == 3, result.stderr
    row = result.stdout.splitlines()[1]
    assert "UNKNOWN" in row
    assert f"no kubeconfig: {missing} (KUBECONFIG) does not exist" in row
    assert FIX in row and "bash scripts/cluster/cluster.sh start" in row
    assert "Service host/port" not in result.stdout


def test_targets_without_any_kubeconfig_says_so_without_a_traceback(tmp_path):
    result = run(tmp_path, "targets", "--stack", "local")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(
        "error: no kubeconfig: ~/.kube/config (the default; KUBECONFIG is not set) does not exist; fix: ")
    assert FIX in result.stderr and "llm-serving:cluster.kubeconfig" in result.stderr


def test_a_context_the_kubeconfig_lacks_is_named(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kwok",
        "clusters": [{"name": "kwok", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "kwok", "user": {}}],
        "contexts": [{"name": "kwok", "context": {"cluster": "kwok", "user": "kwok"}}],
    }))
    stack = tmp_path / "Pulumi.ctx.yaml"
    stack.write_text(yaml.safe_dump({"config": {
        "llm-serving:cluster": {"kubeconfig": str(kubeconfig), "context": "gpu-prod"},
        "llm-serving:models": [{"name": "chat", "source": {"repo": "Qwen/Qwen2.5-0.5B-Instruct"}}],
    }}))
    result = run(tmp_path, "status", "--config", str(stack))
    assert result.returncode == 3
    assert (f"kubeconfig {kubeconfig} (llm-serving:cluster.kubeconfig) has no context 'gpu-prod' "
            "(llm-serving:cluster.context); fix: ") in result.stdout


def test_in_a_pod_the_service_account_is_still_the_fallback(tmp_path):
    """KUBERNETES_SERVICE_HOST set (a pod): no kubeconfig is expected, the in-cluster config is
    tried (here it is incomplete, and the client says so)."""
    result = run(tmp_path, "status", "--stack", "local", KUBERNETES_SERVICE_HOST="10.0.0.1")
    assert result.returncode == 3
    assert "Service host/port is not set" in result.stdout
    assert "no kubeconfig" not in result.stdout


def test_a_python_without_the_kubernetes_client_is_told_to_use_the_venv(tmp_path):
    """Before `source scripts/env.sh` a system Python may lack the client: say that, not
    "cluster not reachable"."""
    code = ("import sys; sys.modules['kubernetes'] = None; from components.cli import main; "
            "sys.exit(main(['status', '--stack', 'local']))")
    home = tmp_path / "home"
    home.mkdir()
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "HOME": str(home)})
    assert result.returncode == 3
    assert f"the Kubernetes client is not installed in this Python ({sys.executable}); fix: " in result.stdout
    assert FIX in result.stdout
