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
from testkit.hf_server import tiny_model_files
from tests.support.names import stem

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

    def run(platform: dict | None = None, cluster: dict | None = None, size: str = "1Gi",
            hf_token: str | None = None) -> dict:
        config = {
            "llm-serving:models": json.dumps([{"name": "tiny", "source": {"repo": REPO}, "weights": {"size": size}}]),
            "llm-serving:platform": json.dumps({"sharedMemorySizeLimit": "1Gi", **(platform or {})}),
        }
        if cluster:
            config["llm-serving:cluster"] = json.dumps(cluster)
        secret_keys = []
        if hf_token is not None:
            config["llm-serving:hfToken"] = hf_token  # the engine hands the program the decrypted value
            secret_keys.append("llm-serving:hfToken")
        pulumi.runtime.set_mocks(Mocks(), preview=True)
        pulumi.runtime.set_all_config(config, secret_keys)

        @pulumi.runtime.test
        def main():
            runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")

        main()
        return declared

    run.declared = declared
    yield run
    pulumi.runtime.set_all_config({})


def puller_revision(declared: dict) -> str:
    # Named after its source (compile/plan.py weights_names): `tiny-puller-<hash>`.
    (puller,) = [manifest for name, manifest in declared.items() if stem(name) == "tiny-puller"]
    args = puller["spec"]["template"]["spec"]["initContainers"][0]["args"]  # `hf download`, then verify
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


def test_a_gated_repo_is_checked_with_the_stacks_token_not_the_machines(hub, program, monkeypatch, tmp_path):
    # The machine running preview has no token of its own (no HF_TOKEN, no `hf auth login`).
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    commit = hub.commit(REPO, tiny_model_files(), gated=True, allowed_tokens={"hf_stack_token"})
    assert puller_revision(program(hf_token="hf_stack_token")) == commit
    assert hub.requests and all(request.authorization for request in hub.requests)


def test_a_stack_token_without_access_names_the_setting_and_never_the_token(hub, program, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    hub.commit(REPO, tiny_model_files(), gated=True, allowed_tokens={"hf_stack_token"})
    with pytest.raises(pulumi.RunError) as refused:
        program(hf_token="hf_wrong_token")
    message = str(refused.value)
    assert "models.0.hfTokenSecret: token lacks access to acme/tiny" in message
    assert "llm-serving:hfToken" in message
    assert "hf_wrong_token" not in message
    assert program.declared == {}
