"""Every bad config of the table is refused by `python -m components validate --config FILE`:
exit 2, one `field.path: reason` line naming the case's field, nothing on stdout, no traceback,
no secret echoed, and no connection to the cluster its stack points at.

Runs the real command line, one process per case (about 0.3 s each, two at a time). The same
table runs under `pulumi preview` in test_bad_input_preview.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.bad_configs import BAD_CONFIGS, BadConfig, refusal_lines, write_stack_file
from tests.support.no_cluster import ConnectionTrap, write_kubeconfig

# Python processes and a loopback trap only: no cluster, no real server (tests/tiers.py).
pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    connections: int


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """Validate every case, each with its own trap as the cluster its kubeconfig names."""
    root = tmp_path_factory.mktemp("bad-validate")

    def run(case: BadConfig) -> Outcome:
        with ConnectionTrap() as trap:
            env = {**os.environ, "KUBECONFIG": str(write_kubeconfig(root / f"{case.id}.kubeconfig", trap.https_url))}
            path = write_stack_file(root / f"Pulumi.{case.id}.yaml", case.sections)
            started = time.monotonic()
            result = subprocess.run([sys.executable, "-m", "components", "validate", "--config", str(path)],
                                    cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
            return Outcome(result.returncode, result.stdout, result.stderr, time.monotonic() - started, trap.count())

    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 2))) as pool:
        return dict(zip((c.id for c in BAD_CONFIGS), pool.map(run, BAD_CONFIGS), strict=True))


def test_the_table_is_big_enough():
    assert len(BAD_CONFIGS) >= 30
    # Every group of guards the issue names has cases.
    ids = " ".join(case.id for case in BAD_CONFIGS)
    for topic in ("not-a", "unknown", "uid-0", "privileged", "loopback", "tensor-parallel", "rwo",
                  "46-chars", "64-chars", "duplicate", "router-", "auth-secret", "plain-text",
                  "int32", "label-", "shape-", "secret-value", "no-effect", "served-name"):
        assert topic in ids, topic


@pytest.mark.parametrize("case", BAD_CONFIGS, ids=[c.id for c in BAD_CONFIGS])
def test_validate_refuses_at_the_field(case: BadConfig, outcomes):
    outcome = outcomes[case.id]
    assert outcome.returncode == 2, (outcome.returncode, outcome.stdout, outcome.stderr)
    assert refusal_lines(outcome.stderr, case), f"no '{case.path}: …{case.fragment}…' line in:\n{outcome.stderr}"
    assert outcome.stdout == "", "a refused config must not print a success line"
    assert "Traceback" not in outcome.stderr
    for secret in case.secrets:
        assert secret not in outcome.stderr + outcome.stdout, "a refusal echoed the secret"
    assert outcome.connections == 0, f"{outcome.connections} connection(s) to the cluster"


def test_a_valid_config_passes_through_the_same_harness(tmp_path):
    """The control: the command accepts a good stack, so the refusals above are the config's."""
    path = write_stack_file(tmp_path / "Pulumi.good.yaml", {
        "models": [{"name": "chat", "source": {"repo": "acme/tiny-llm"}}],
        "hfToken": {"secure": "v1:c2VjcmV0"},
    })
    result = subprocess.run([sys.executable, "-m", "components", "validate", "--config", str(path)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("valid: 1 model(s)")
