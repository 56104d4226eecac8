"""`source scripts/env.sh`: the one line the README gives for a shell with the project's tools.

It must put the venv first on PATH and export the offline Pulumi settings and the simulated
cluster's KUBECONFIG, and leave the caller's shell options alone (lib.sh turns on errexit,
which would close an interactive shell at its next failing command).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bash(script: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LLM_SERVING_STATE_DIR"}  # the default state dir
    return subprocess.run(["bash", "-c", script], cwd="/", capture_output=True, text=True, env=env)


def test_sourcing_exports_the_tools_and_keeps_the_shell_options():
    result = bash(f"""
        set +e +u +o pipefail
        source {ROOT}/scripts/env.sh
        echo "opts=$(set -o | awk '$1 ~ /^(errexit|nounset|pipefail)$/ {{print $1"="$2}}' | paste -sd,)"
        echo "kubeconfig=$KUBECONFIG"
        echo "expected=$(bash {ROOT}/scripts/cluster/cluster.sh kubeconfig)"
        echo "path0=${{PATH%%:*}}"
        echo "backend=$PULUMI_BACKEND_URL"
        echo "passphrase=${{PULUMI_CONFIG_PASSPHRASE+set}}"
    """)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert lines["opts"] == "errexit=off,nounset=off,pipefail=off"
    assert lines["kubeconfig"] and lines["kubeconfig"] == lines["expected"]
    assert lines["path0"] == f"{ROOT}/.venv/bin"
    assert lines["backend"] == f"file://{ROOT}/.pulumi-state"
    assert lines["passphrase"] == "set"
    assert "run pulumi from" in result.stderr


def test_running_instead_of_sourcing_says_how():
    result = bash(f"bash {ROOT}/scripts/env.sh")
    assert result.returncode == 2
    assert "source it, do not run it" in result.stderr
