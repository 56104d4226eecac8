"""The `render` stack (pulumi-kubernetes render-to-directory) writes exactly what
`python -m components render` writes: one source of truth for manifests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testkit.harness import REPO, Project, require_engine

pytestmark = pytest.mark.integration


def _objects(directory: Path) -> dict[tuple, dict]:
    found = {}
    for path in sorted(directory.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                meta = document["metadata"]
                found[(document["kind"], meta.get("namespace", ""), meta["name"])] = document
    return found


def test_render_stack_equals_cli_render(tmp_path):
    require_engine()
    config = yaml.safe_load((REPO / "stacks" / "Pulumi.render.yaml").read_text())["config"]
    raw = {key.split(":", 1)[1]: value for key, value in config.items() if key.startswith("llm-serving:")}
    engine_dir = tmp_path / "engine-render"
    raw["cluster"] = {"renderYamlToDirectory": str(engine_dir)}
    (tmp_path / "project").mkdir()
    project = Project(tmp_path / "project", "render", raw)
    project.up()

    cli_dir = tmp_path / "cli-render"
    subprocess.run([sys.executable, "-m", "components", "render", "--config", str(project.config_file),
                    "--out", str(cli_dir)], cwd=REPO, check=True)
    engine, cli = _objects(engine_dir), _objects(cli_dir)
    assert len(cli) >= 6, "the render stack declares a namespace, a service account and a model"
    assert sorted(engine) == sorted(cli)
    for key, document in cli.items():
        assert engine[key] == document, key
    shutil.rmtree(engine_dir)
