"""The bad-config table under the real engine: `pulumi preview` refuses each case with its field
path, cleanly (no traceback), without echoing a secret, and with ZERO connections to the cluster
or to the Hugging Face endpoint.

Which cases: the whole table (108) runs through the same program in-process
(tests/program/test_program_bad_configs.py, ~2 s); here a representative few (PREVIEWED), one per
way a stack value travels from the stack file through the engine into the program's one
validation (components/config/loader.py ``load_program_config``): an unknown section (the
engine's key list), a stack secret in plain text (the secret stand-in, never echoed), a number out of int32 range, a fraction, a boolean
and a quoted number (the engine's JSON encoding), and a cross-section error (router vs models).
Each preview must print exactly the refusal lines the in-process run prints: that is the proof the
in-process table runs what `preview` runs, not a re-implementation. A section of the wrong type
(`models: llama-8b`) no longer reaches the program: Pulumi.yaml declares the sections' types and
the engine refuses it first (tests/integration/test_project_config_on_engine.py).

Proof by observation: each case's stack points at its own kubeconfig whose server is a loopback
listener that records every connection (tests/support/no_cluster.py), and preflight's endpoint at
another one. A valid stack previewed the same way does connect (the control), so an empty log
means the program stopped before the cluster, not that the trap is deaf.

Cost: one preview of a refused config takes ~4 s here (engine start, Python program, refusal),
two at a time (the 108-case table took ~3.6 min this way; the 7 here ~20 s). The control takes
~4 s: the trap refuses every connection after the first, which the Kubernetes provider does not
retry (it retried the trap's dropped connections for 20 s).
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from testkit.harness import Project
from tests.support.bad_configs import BY_ID, BadConfig, refusal_lines
from tests.support.no_cluster import ConnectionTrap, write_kubeconfig
from tests.support.program_kit import run_program

pytestmark = [pytest.mark.integration, pytest.mark.faults]

PREFLIGHT_ENDPOINT_ENV = "LLM_SERVING_HF_PREFLIGHT_ENDPOINT"
WORKERS = 2
PREVIEWED = tuple(BY_ID[case_id] for case_id in (
    "unknown-section", "hf-token-in-plain-text", "int32-replicas",
    "replicas-fractional", "gpus-boolean", "replicas-quoted", "router-fronts-unknown-model"))


@dataclass
class Outcome:
    returncode: int
    output: str
    seconds: float
    cluster_connections: int
    hub_connections: int


def _require_pulumi() -> None:
    if not shutil.which("pulumi"):
        pytest.fail("these tests need the pulumi CLI on PATH; run them through scripts/test.sh")


def preview(root, name: str, sections: dict, timeout: int = 300) -> Outcome:
    """`pulumi preview` of ``sections`` in a fresh project copy, against a trap cluster and hub."""
    root.mkdir(parents=True)
    with ConnectionTrap() as cluster, ConnectionTrap() as hub:
        project = Project(root, name, sections)
        project.env["KUBECONFIG"] = str(write_kubeconfig(root / "kubeconfig", cluster.https_url))
        project.env[PREFLIGHT_ENDPOINT_ENV] = hub.http_url
        started = time.monotonic()
        result = project.run("preview", check=False, timeout=timeout)
        seconds = time.monotonic() - started
        return Outcome(result.returncode, result.stdout + result.stderr, seconds, cluster.count(), hub.count())


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory) -> dict[str, Outcome]:
    """Previews of the cases selected in this session (all, unless `-k` narrowed them), in parallel."""
    _require_pulumi()
    wanted = {item.callspec.params["case"].id for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec") and "case" in item.callspec.params}
    base = tmp_path_factory.mktemp("bad-preview")
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {case.id: pool.submit(preview, base / case.id, f"bad{index}", case.sections)
                   for index, case in enumerate(PREVIEWED) if case.id in wanted}
        results = {case_id: future.result() for case_id, future in futures.items()}
    seconds = sorted(outcome.seconds for outcome in results.values())
    print(f"\npulumi preview of {len(seconds)} refused configs: median {seconds[len(seconds) // 2]:.1f} s, "
          f"max {seconds[-1]:.1f} s, {WORKERS} at a time")
    return results


def problem_lines(output: str) -> list[str]:
    """The ``field.path: reason`` lines of a refusal: the lines under "invalid stack config:"
    (the engine prints it as "error: invalid stack config:" in its Diagnostics, the in-process
    run as the RunError's text), without the engine's indentation."""
    lines = [line.strip() for line in output.splitlines()]
    starts = [i for i, line in enumerate(lines) if line in ("invalid stack config:", "error: invalid stack config:")]
    if not starts:
        return []
    found = []
    for line in lines[starts[-1] + 1:]:
        if not line or line.startswith("error:"):
            break
        found.append(line)
    return found


@pytest.mark.parametrize("case", PREVIEWED, ids=[c.id for c in PREVIEWED])
def test_preview_refuses_at_the_field_without_touching_the_cluster(case: BadConfig, outcomes):
    outcome = outcomes[case.id]
    assert outcome.returncode != 0, outcome.output[-3000:]
    assert refusal_lines(outcome.output, case), f"no '{case.path}: …{case.fragment}…' line in:\n{outcome.output[-3000:]}"
    assert "invalid stack config" in outcome.output
    assert "Traceback" not in outcome.output, outcome.output[-3000:]
    for secret in case.secrets:
        assert secret not in outcome.output, "the refusal echoed the secret"
    assert outcome.cluster_connections == 0, f"{outcome.cluster_connections} connection(s) to the cluster"
    assert outcome.hub_connections == 0, f"{outcome.hub_connections} connection(s) to the HF endpoint"


@pytest.mark.parametrize("case", PREVIEWED, ids=[c.id for c in PREVIEWED])
def test_preview_prints_exactly_what_the_in_process_program_raises(case: BadConfig, outcomes, monkeypatch):
    """The in-process table's warrant: the engine's refusal lines are the in-process run's, one
    for one (same program, same config values, same validation)."""
    in_process = run_program(case.sections, monkeypatch)
    expected = problem_lines(in_process.engine_output)
    assert expected, in_process.engine_output
    assert problem_lines(outcomes[case.id].output) == expected, outcomes[case.id].output[-3000:]


def test_a_valid_stack_does_reach_the_trap(tmp_path):
    """The control: same harness, a valid stack (preflight off) — the trap records connections."""
    _require_pulumi()
    outcome = preview(tmp_path / "control", "control", {
        "platform": {"preflight": {"enabled": False}},
        "models": [{"name": "chat", "source": {"repo": "acme/tiny-llm", "revision": "main"}}],
    })
    assert "invalid stack config" not in outcome.output
    assert outcome.cluster_connections > 0, outcome.output[-3000:]
