"""Every bad config of the table is refused by `python -m components validate --config FILE`:
exit 2, one `field.path: reason` line naming the case's field, nothing on stdout, no traceback,
no secret echoed, and no connection to the cluster its stack points at.

Every case runs the command's own entry point in-process (`components.cli.main`, what
`python -m components` calls: ~20 ms a case instead of a 0.3 s interpreter start), and a sample
of cases also runs as the real command line in a process of its own, which must print exactly
the same refusal. The same table runs through the Pulumi program in tests/program, and a few
cases under a real `pulumi preview` in test_bad_input_preview.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from components import cli
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


def _in_process(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["validate", "--config", str(path)])
    return code, out.getvalue(), err.getvalue()


def _process(path: Path, env: dict) -> tuple[int, str, str]:
    result = subprocess.run([sys.executable, "-m", "components", "validate", "--config", str(path)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout, result.stderr


# Every 12th case (9 of the table, across its groups) also as the real command line.
IN_A_PROCESS = {case.id for case in BAD_CONFIGS[::12]}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """Validate every case, each with its own trap as the cluster its kubeconfig names."""
    root = tmp_path_factory.mktemp("bad-validate")
    results: dict[str, Outcome] = {}
    saved = os.environ.get("KUBECONFIG")
    try:
        for case in BAD_CONFIGS:
            with ConnectionTrap() as trap:
                kubeconfig = str(write_kubeconfig(root / f"{case.id}.kubeconfig", trap.https_url))
                os.environ["KUBECONFIG"] = kubeconfig
                path = write_stack_file(root / f"Pulumi.{case.id}.yaml", case.sections)
                started = time.monotonic()
                code, out, err = _in_process(path)
                results[case.id] = Outcome(code, out, err, time.monotonic() - started, trap.count())
    finally:
        if saved is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = saved
    return results


@pytest.mark.parametrize("case", [c for c in BAD_CONFIGS if c.id in IN_A_PROCESS], ids=lambda c: c.id)
def test_the_real_command_line_prints_the_same_refusal(case: BadConfig, outcomes, tmp_path):
    with ConnectionTrap() as trap:
        env = {**os.environ, "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig", trap.https_url))}
        code, out, err = _process(write_stack_file(tmp_path / f"Pulumi.{case.id}.yaml", case.sections), env)
        assert trap.count() == 0
    assert (code, out, err) == (outcomes[case.id].returncode, outcomes[case.id].stdout, outcomes[case.id].stderr)


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
