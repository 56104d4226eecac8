"""The whole bad-config table (tests/support/bad_configs.py) through the program `pulumi preview`
runs: `__main__.py`, run in this process the way the language host runs it
(tests/support/program_kit.py), refuses each case with its field path, as one RunError (the host
prints that without a traceback), before declaring a single resource, without echoing a secret and
without one socket connection (the cluster and the hub are not dialled).

A real `pulumi preview` of a representative few, and the proof that its refusal lines are exactly
the ones this run produces, is tests/faults/test_bad_input_preview.py (~4 s a case there, ~15 ms
here). The same table also goes through `python -m components validate`
(tests/faults/test_bad_input_validate.py).
"""

from __future__ import annotations

import pulumi
import pytest

from tests.support.bad_configs import BAD_CONFIGS, BadConfig, refusal_lines
from tests.support.program_kit import run_program


@pytest.mark.parametrize("case", BAD_CONFIGS, ids=[c.id for c in BAD_CONFIGS])
def test_the_program_refuses_at_the_field_before_any_resource(case: BadConfig, monkeypatch):
    run = run_program(case.sections, monkeypatch)
    output = run.engine_output
    assert isinstance(run.error, pulumi.RunError), f"not a clean refusal: {run.error!r}"
    assert refusal_lines(output, case), f"no '{case.path}: …{case.fragment}…' line in:\n{output}"
    assert output.startswith("invalid stack config"), output
    for secret in case.secrets:
        assert secret not in output, "the refusal echoed the secret"
    assert run.declared == [], f"resources declared before the refusal: {run.declared}"
    assert run.connections == [], f"connections attempted: {run.connections}"


def test_a_valid_stack_runs_through_the_same_harness(monkeypatch):
    """The control: a valid stack declares its resources, so an empty list above is the refusal's
    doing; and a connection the program attempts is recorded (the guard is not deaf)."""
    run = run_program({"platform": {"preflight": {"enabled": False}},
                       "models": [{"name": "chat", "source": {"repo": "acme/tiny-llm", "revision": "main"}}]},
                      monkeypatch)
    assert run.error is None, run.engine_output
    assert any(name.startswith("pulumi:providers:kubernetes::") for name in run.declared), run.declared
    assert any("Deployment" in name for name in run.declared), run.declared


def test_the_guard_records_a_connection_the_program_makes(monkeypatch):
    """With preflight on, the program asks the hub: the attempt is recorded and refused."""
    monkeypatch.setenv("LLM_SERVING_HF_PREFLIGHT_ENDPOINT", "http://127.0.0.1:9")
    run = run_program({"models": [{"name": "chat", "source": {"repo": "acme/tiny-llm", "revision": "main"}}]},
                      monkeypatch)
    assert run.connections, run.engine_output
