"""The CI workflow users copy (docs/ci/github-actions-preview.yml) is a valid GitHub Actions
workflow, checked by actionlint (built from the Go module proxy by scripts/testtools/build.sh),
and runs this repository's commands as they are: the preview report's flags, its exit status for
a failed preview, the files it names."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from components.cli import build_parser
from components.preview_report import EXIT_PREVIEW_FAILED

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "docs" / "ci" / "github-actions-preview.yml"
BUILD = REPO / "scripts" / "testtools" / "build.sh"


@pytest.fixture(scope="module")
def actionlint() -> Path:
    """The linter; built (about 30 s, once per version) when missing, like the other test tools."""
    subprocess.run(["bash", str(BUILD), "actionlint"], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run(["bash", str(BUILD), "--print-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip()) / "bin" / "actionlint"


def lint(actionlint: Path, path: Path) -> subprocess.CompletedProcess:
    # No shellcheck/pyflakes integration: actionlint runs them only when they are on PATH, so a
    # machine that has them would lint differently from one that has not.
    return subprocess.run([str(actionlint), "-shellcheck=", "-pyflakes=", "-no-color", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_actionlint_finds_nothing(actionlint):
    result = lint(actionlint, WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1.7.12" in subprocess.run([str(actionlint), "-version"], capture_output=True, text=True).stdout


def test_actionlint_reports_a_broken_copy(actionlint, tmp_path):
    # The linter really reads the file: a step id misspelt where its output is read is an error.
    broken = tmp_path / "broken.yml"
    text = WORKFLOW.read_text()
    assert "steps.preview.outputs.status" in text
    broken.write_text(text.replace("steps.preview.outputs.status", "steps.previw.outputs.status"))
    result = lint(actionlint, broken)
    assert result.returncode == 1 and 'property "previw" is not defined' in result.stdout, result.stdout


def _steps() -> list[dict]:
    document = yaml.safe_load(WORKFLOW.read_text())
    (job,) = document["jobs"].values()
    return job["steps"]


def _preview_step() -> dict:
    (step,) = [s for s in _steps() if "preview-report" in s.get("run", "")]
    return step


def test_the_preview_step_uses_the_report_command_as_it_is():
    step = _preview_step()
    command = step["run"].split("preview-report", 1)[1].split("||", 1)[0]
    words = shlex.split(command.replace("\\\n", " "))
    flags = [word for word in words if word.startswith("--")]
    parser = build_parser()
    (report,) = [action for action in parser._subparsers._group_actions if "preview-report" in action.choices]
    known = {option for action in report.choices["preview-report"]._actions for option in action.option_strings}
    assert set(flags) <= known, set(flags) - known
    assert {"--stack", "--policy-pack", "--policy-pack-config", "--out", "--save-json"} <= set(flags)
    values = dict(zip(words[::2], words[1::2], strict=False))
    assert (REPO / values["--policy-pack"] / "PulumiPolicy.yaml").is_file()
    assert (REPO / values["--policy-pack-config"]).is_file()
    # The status the report command exits with when the preview failed (report still written).
    assert f'"$status" != {EXIT_PREVIEW_FAILED}' in step["run"]


def test_the_comment_and_artifact_are_the_files_the_report_writes():
    words = shlex.split(_preview_step()["run"].split("preview-report", 1)[1].split("||", 1)[0].replace("\\\n", " "))
    values = dict(zip(words[::2], words[1::2], strict=False))
    (comment,) = [s for s in _steps() if "gh pr comment" in s.get("run", "")]
    assert f"--body-file {values['--out']}" in comment["run"]
    (upload,) = [s for s in _steps() if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == values["--save-json"] and upload["if"] == "always()"


def test_the_environment_is_the_pinned_one():
    document = yaml.safe_load(WORKFLOW.read_text())
    (install,) = [s for s in _steps() if "pip install" in s.get("run", "")]
    for requirements in re.findall(r"-r (\S+)", install["run"]):
        assert (REPO / requirements).is_file(), requirements
    assert "policies/requirements.txt" in install["run"] and "python -m venv .venv" in install["run"]
    versions = (REPO / "scripts" / "toolchain" / "versions.sh").read_text()
    assert f"PULUMI_VERSION={document['env']['PULUMI_VERSION']}\n" in versions
    # The stack it previews exists.
    assert (REPO / "stacks" / f"Pulumi.{document['env']['STACK']}.yaml").is_file()
