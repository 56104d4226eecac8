"""docs/config-reference.md is generated from the config model; fail when it is stale."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from tests.support.builders import ROOT

SCRIPT = ROOT / "scripts" / "gen_config_reference.py"
DOC = ROOT / "docs" / "config-reference.md"
FIX = "run `python scripts/gen_config_reference.py` and commit docs/config-reference.md"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_reference_is_current():
    assert DOC.exists(), f"{DOC} is missing; {FIX}"
    assert _generator().render() == DOC.read_text(), f"{DOC} is stale; {FIX}"


def test_reference_names_every_nested_key():
    text = _generator().render()
    for key in ("llm-serving:models[].weights.accessMode", "llm-serving:platform.vllmUid",
                "llm-serving:models[].hfTokenSecret.name", "llm-serving:platform.gpuTolerations[].effect",
                "llm-serving:cluster.renderYamlToDirectory", "llm-serving:models[].source.repo"):
        assert f"`{key}`" in text, key


def test_check_flag_fails_on_a_stale_file(tmp_path):
    stale = tmp_path / "config-reference.md"
    stale.write_text("# old\n")
    result = subprocess.run([sys.executable, str(SCRIPT), "--check", "--output", str(stale)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1
    assert "stale" in result.stderr and "gen_config_reference.py" in result.stderr
    fresh = tmp_path / "fresh.md"
    assert subprocess.run([sys.executable, str(SCRIPT), "--output", str(fresh)], cwd=ROOT).returncode == 0
    result = subprocess.run([sys.executable, str(SCRIPT), "--check", "--output", str(fresh)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
