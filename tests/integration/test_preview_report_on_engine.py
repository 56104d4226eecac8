"""`python -m components preview-report` end to end: a real `pulumi preview` (streaming JSON, the
policy pack) of a stack deployed on the simulated cluster, summarized for a pull request."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from policies.rules import ALL_RULES
from testkit.harness import small_model, stack_config

pytestmark = pytest.mark.integration

TIMEOUT = 300


@pytest.fixture(scope="module")
def deployed(make_project):
    project = make_project(lambda ns: stack_config(ns, [small_model()]))
    project.up()
    return project


def _report(project, tmp_path, config: dict, pack_config: str = "policies/config.example.json") -> tuple[int, str, str]:
    out, saved = tmp_path / "report.md", tmp_path / "preview.jsonl"
    with project.config_for_now(config):
        result = subprocess.run(
            [sys.executable, "-m", "components", "preview-report", "--stack", project.stack,
             "--policy-pack", "policies", "--policy-pack-config", pack_config,
             "--out", str(out), "--save-json", str(saved), "--timeout", str(TIMEOUT)],
            cwd=project.root, env=project.env, capture_output=True, text=True, timeout=TIMEOUT + 60)
    assert out.exists(), result.stderr[-4000:]
    return result.returncode, out.read_text(), saved.read_text()


def test_image_change_report(deployed, tmp_path):
    code, report, saved = _report(
        deployed, tmp_path, stack_config(deployed.namespace, [small_model(image="docker.io/vllm/vllm-openai:v0.11.1")]))
    assert code == 0, report
    assert f"## Pulumi preview: stack `{deployed.stack}`" in report
    assert "- **GPU pods will restart** (image tag v0.11.0 → v0.11.1)" in report
    assert "re-downloaded" not in report
    # Every rule of the pack ran (counted from the pack, not a number that goes stale).
    assert f"policies: ✅ {len(ALL_RULES)} rules passed (llm-serving 0.2.0)" in report
    # The saved JSON is the streaming form, with the policy results the digest leaves out.
    events = [json.loads(line) for line in saved.splitlines() if line.strip()]
    assert any("policyAnalyzeSummaryEvent" in e for e in events)


def test_revision_change_report(deployed, tmp_path):
    code, report, _ = _report(deployed, tmp_path, stack_config(deployed.namespace, [small_model(revision="v2")]))
    assert code == 0, report
    assert "- **weights will be re-downloaded** (revision main → v2)" in report
    assert "- **GPU pods will restart** (onto the new weights volume)" in report


def test_mandatory_violation_fails_with_the_rule_in_the_report(deployed, tmp_path):
    tight = tmp_path / "tight.json"
    tight.write_text(json.dumps({"llm-serving-pod-engine-identity": {"vllmUid": 1234}}))
    code, report, _ = _report(deployed, tmp_path, stack_config(deployed.namespace, [small_model()]), str(tight))
    assert code == 4, report
    assert "- **mandatory** `llm-serving-pod-engine-identity`" in report
    assert "`tiny-server`: Deployment 'tiny'" in report
    assert "**no changes** · ❌ preview failed" in report
