"""Golden YAML of compile_stack for fixed configs: a reviewable record of every rendered field.

A mismatch shows a unified diff. After an intended change, regenerate and review the diff:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/compile/test_golden.py
"""

from __future__ import annotations

import difflib
import os

import pytest
import yaml

from tests.support.builders import FIXTURES, compile_stack, fixture_stack

GOLDEN = FIXTURES / "golden"
CASES = ["minimal", "rich", "metrics", "perpod", "streamed", "revisions", "cpu"]  # inputs: tests/fixtures/stacks/Pulumi.<case>.yaml


def render(case: str) -> str:
    return yaml.safe_dump_all(compile_stack(fixture_stack(case)), sort_keys=True, default_flow_style=False)


@pytest.mark.parametrize("case", CASES)
def test_compile_stack_matches_golden(case: str):
    path = GOLDEN / f"{case}.yaml"
    actual = render(case)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    if not path.exists():
        pytest.fail(f"{path} is missing; create it with UPDATE_GOLDEN=1")
    expected = path.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"golden/{case}.yaml", tofile=f"compile_stack({case})",
        ))
        pytest.fail(f"rendered manifests differ from {path}; if intended, rerun with UPDATE_GOLDEN=1\n{diff}",
                    pytrace=False)


def test_render_is_deterministic():
    assert render("rich") == render("rich")
