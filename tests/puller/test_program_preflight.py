"""The Pulumi program (__main__.py) under mocks, with preflight asking the loopback server:
preflight runs before any resource is declared, pins what the puller downloads, stops the
program on a problem, and is skipped when rendering or disabled."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pulumi
import pytest

from components.preflight import ENDPOINT_ENV
from components.resources import kubernetes as kube_resources
from hf_server import tiny_model_files

ROOT = Path(__file__).resolve().parents[2]
REPO = "acme/tiny"


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return [f"{args.name}-id", dict(args.inputs)]

    def call(self, args):
        return {}


@pytest.fixture
def program(hub, monkeypatch):
    """Run __main__.py with the given stack config; returns the manifests it declared."""
    monkeypatch.setenv(ENDPOINT_ENV, hub.url)
    declared: dict[str, dict] = {}
    original = kube_resources.apply

    def apply(name, manifest, opts=None):
        declared[name] = manifest
        return original(name, manifest, opts)

    monkeypatch.setattr(kube_resources, "apply", apply)

    def run(platform: dict | None = None, cluster: dict | None = None, size: str = "1Gi") -> dict:
        config = {
            "llm-serving:models": json.dumps([{"name": "tiny", "source": {"repo": REPO}, "weights": {"size": size}}]),
            "llm-serving:platform": json.dumps({"sharedMemorySizeLimit": "1Gi", **(platform or {})}),
        }
        if cluster:
            config["llm-serving:cluster"] = json.dumps(cluster)
        pulumi.runtime.set_mocks(Mocks(), preview=True)
        pulumi.runtime.set_all_config(config)

        @pulumi.runtime.test
        def main():
            runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")

        main()
        return declared

    run.declared = declared
    yield run
    pulumi.runtime.set_all_config({})


def puller_revision(declared: dict) -> str:
    args = declared["tiny-puller"]["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--revision") + 1]


def test_preview_pins_the_puller_to_the_commit(hub, program):
    commit = hub.commit(REPO, tiny_model_files())
    assert puller_revision(program()) == commit


def test_a_problem_stops_the_program_before_any_resource(hub, program):
    hub.commit(REPO, tiny_model_files(weight_bytes=4 << 20))
    with pytest.raises(pulumi.RunError, match="models.0.weights.size: 1Mi"):
        program(size="1Mi")
    assert program.declared == {}


@pytest.mark.parametrize("platform, cluster", [
    ({"preflight": {"enabled": False}}, None),
    (None, {"renderYamlToDirectory": "build/render-test"}),
])
def test_disabled_or_rendering_never_asks_the_hub(hub, program, platform, cluster):
    hub.commit(REPO, tiny_model_files())
    assert puller_revision(program(platform, cluster)) == "main"
    assert hub.requests == []
