"""Stack secrets (`llm-serving:hfToken`, `llm-serving:ngcApiKey`) under Pulumi mocks and in the
config model: they reach Kubernetes Secrets as secret Outputs and nothing else holds them.

The program (__main__.py) runs as the engine would run it, with the values marked secret; every
property of every registered resource, every component/stack output and every log line is
checked for the plaintext outside a secret wrapper. The engine-level greps (stack export,
outputs, rendered files, CLI logs) are in test_secrets_engine.py.
"""

from __future__ import annotations

import json
import logging
import runpy
import subprocess
import sys
from pathlib import Path

import pulumi
import pytest
import yaml
from google.protobuf import json_format
from pulumi.runtime.mocks import MockMonitor

from components.compile import compile_stack
from components.config import ConfigError, StackConfig, load_stack_config, read_stack_file
from components.config.stack_secrets import HF_TOKEN_SECRET, NGC_API_KEY_SECRET, SECRET_SECTIONS
from components.config.types import StackSecret
from tests.support.names import stem

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_MockProgramToken0123456789abcdefABCDEF"
NGC_KEY = "nvapi-MockProgramKey0123456789abcdefABCDEF"
CIPHERTEXT = "v1:c2VjcmV0LWNpcGhlcnRleHQ="
# The SDK's marker of a secret value on the wire (sdk/python/lib/pulumi/runtime/rpc.py).
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
NIM_IMAGE = "nvcr.io/nim/nvidia/llm-nim:1.12.0"

MODELS = [
    {"name": "open", "source": {"repo": "acme/open"}},
    {"name": "own-secret", "source": {"repo": "acme/gated"}, "hfTokenSecret": {"name": "team-hf", "key": "hf"}},
    {"name": "nim-raw", "engine": "nim", "image": NIM_IMAGE, "source": {"repo": "acme/nim"}},
]


def registered(recorder, name: str) -> dict:
    """The registration of ``name``, a weights child by its name without its source hash."""
    (found,) = [entry for key, entry in recorder.registered.items() if stem(key) == name]
    return found


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return [f"{args.name}-id", dict(args.inputs)]

    def call(self, args):
        return {}


class Recorder(MockMonitor):
    """What the engine would receive: each resource's serialized inputs and dependencies, and
    every RegisterResourceOutputs (component and stack outputs), secret markers intact."""

    def __init__(self, mocks):
        super().__init__(mocks)
        self.registered: dict[str, dict] = {}
        self.outputs: list[dict] = []

    def RegisterResource(self, request):  # noqa: N802 - overrides MockMonitor's gRPC method name
        response = super().RegisterResource(request)
        self.registered[request.name] = {
            "type": request.type, "urn": response.urn,
            "wire": json_format.MessageToDict(request.object),
            "dependencies": list(request.dependencies),
        }
        return response

    def RegisterResourceOutputs(self, request):  # noqa: N802 - overrides MockMonitor's gRPC method name
        self.outputs.append(json_format.MessageToDict(request.outputs))
        return super().RegisterResourceOutputs(request)


class Logs(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def plain_strings(value) -> list[str]:
    """Every string in a wire-shape value that is not inside a secret wrapper."""
    if isinstance(value, dict):
        if SECRET_SIG in value.values():
            return []
        return [s for v in value.values() for s in plain_strings(v)] + [k for k in value if isinstance(k, str)]
    if isinstance(value, list):
        return [s for v in value for s in plain_strings(v)]
    return [value] if isinstance(value, str) else []


def is_secret(value) -> bool:
    return isinstance(value, dict) and SECRET_SIG in value.values()


def run_program(config: dict, secret_keys: list[str]):
    recorder, logs = Recorder(Mocks()), Logs()
    logger = logging.getLogger(f"llm-serving-secrets-{id(recorder)}")
    logger.addHandler(logs)
    logger.setLevel(logging.DEBUG)
    pulumi.runtime.set_mocks(Mocks(), preview=True, monitor=recorder, logger=logger)
    pulumi.runtime.set_all_config({f"llm-serving:{k}": v if isinstance(v, str) else json.dumps(v)
                                   for k, v in config.items()}, [f"llm-serving:{k}" for k in secret_keys])
    program_globals: dict = {}

    @pulumi.runtime.test
    def main():
        program_globals.update(runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__"))

    try:
        main()
    finally:
        pulumi.runtime.set_all_config({})
    return recorder, logs, program_globals


def env_of(container: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in container.get("env", [])}


@pytest.fixture
def deployed():
    config = {"platform": {"preflight": {"enabled": False}}, "models": MODELS, "hfToken": TOKEN, "ngcApiKey": NGC_KEY}
    return run_program(config, secret_keys=["hfToken", "ngcApiKey"])


def test_each_token_becomes_a_kubernetes_secret_as_a_secret_output(deployed):
    recorder, _, _ = deployed
    hf = recorder.registered[f"platform-{HF_TOKEN_SECRET.name}"]
    ngc = recorder.registered[f"platform-{NGC_API_KEY_SECRET.name}"]
    for secret, key in ((hf, HF_TOKEN_SECRET.key), (ngc, NGC_API_KEY_SECRET.key)):
        assert secret["type"] == "kubernetes:core/v1:Secret"
        assert is_secret(secret["wire"]["stringData"]) or is_secret(secret["wire"]["stringData"][key])
        assert "data" not in secret["wire"]
    assert hf["wire"]["metadata"]["name"] == "llm-serving-hf-token"
    assert ngc["wire"]["metadata"]["name"] == "llm-serving-ngc-api-key"


def test_the_plaintext_is_nowhere_outside_a_secret(deployed):
    recorder, logs, program_globals = deployed
    for name, resource in recorder.registered.items():
        for text in plain_strings(resource["wire"]):
            assert TOKEN not in text and NGC_KEY not in text, name
    for outputs in recorder.outputs:
        assert not any(TOKEN in s or NGC_KEY in s for s in plain_strings(outputs))
    assert not any(TOKEN in line or NGC_KEY in line for line in logs.lines)
    stack: StackConfig = program_globals["stack"]
    dumped = stack.model_dump_json()
    assert TOKEN not in dumped and NGC_KEY not in dumped
    assert (stack.hf_token, stack.ngc_api_key) == ("[secret]", "[secret]")


def test_models_without_their_own_secret_read_the_stack_secrets(deployed):
    recorder, _, _ = deployed

    def container(resource: str) -> dict:
        spec = registered(recorder, resource)["wire"]["spec"]["template"]["spec"]
        # A Hub puller's token is its init container's, `hf download` (its verify step reads none).
        return spec["initContainers" if resource.endswith("-puller") else "containers"][0]

    token_ref = {"name": HF_TOKEN_SECRET.name, "key": HF_TOKEN_SECRET.key}
    assert env_of(container("open-puller"))["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == token_ref
    assert env_of(container("nim-raw-puller"))["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == token_ref
    assert env_of(container("own-secret-puller"))["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "team-hf", "key": "hf"}
    assert env_of(container("nim-raw-server"))["NGC_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": NGC_API_KEY_SECRET.name, "key": "NGC_API_KEY"}


def test_models_wait_for_the_secrets(deployed):
    recorder, _, _ = deployed
    secret_urns = {recorder.registered[f"platform-{ref.name}"]["urn"] for ref in (HF_TOKEN_SECRET, NGC_API_KEY_SECRET)}
    assert secret_urns <= set(registered(recorder, "open-weights")["dependencies"])


def test_a_plain_text_token_is_refused_without_being_echoed():
    config = {"platform": {"preflight": {"enabled": False}}, "models": MODELS[:1], "hfToken": TOKEN}
    with pytest.raises(pulumi.RunError) as raised:
        run_program(config, secret_keys=[])
    message = str(raised.value)
    assert "hfToken: is stored in plain text" in message and "pulumi config set --secret hfToken" in message
    assert TOKEN not in message


def test_rendering_declares_no_secret_and_says_so(tmp_path):
    config = {"platform": {"preflight": {"enabled": False}}, "models": MODELS[:1], "hfToken": TOKEN,
              "cluster": {"renderYamlToDirectory": str(tmp_path / "render")}}
    recorder, logs, _ = run_program(config, secret_keys=["hfToken"])
    assert not [r for r in recorder.registered.values() if r["type"] == "kubernetes:core/v1:Secret"]
    assert any("Secret llm-serving-hf-token" in line and "not written" in line for line in logs.lines)
    # The puller still reads the Secret by name: it must exist in the cluster the files go to.
    puller = registered(recorder, "open-puller")["wire"]["spec"]["template"]["spec"]["initContainers"][0]
    assert env_of(puller)["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == HF_TOKEN_SECRET.name
    for resource in recorder.registered.values():
        assert not any(TOKEN in text for text in plain_strings(resource["wire"]))


def test_a_secret_no_model_reads_is_not_created_and_warned_about():
    config = {"platform": {"preflight": {"enabled": False}}, "models": [MODELS[1]], "hfToken": TOKEN}
    recorder, logs, _ = run_program(config, secret_keys=["hfToken"])
    assert f"platform-{HF_TOKEN_SECRET.name}" not in recorder.registered
    assert any("llm-serving:hfToken is set but no model reads it" in line for line in logs.lines)


# --- config model, validate and render: they know a secret is set, never its value -----------------

def stack_file(tmp_path: Path, **sections) -> Path:
    path = tmp_path / "Pulumi.secrets.yaml"
    path.write_text(yaml.safe_dump({"config": {f"llm-serving:{k}": v for k, v in sections.items()}}))
    return path


def test_the_config_model_holds_a_marker_not_the_ciphertext(tmp_path):
    path = stack_file(tmp_path, models=MODELS, hfToken={"secure": CIPHERTEXT}, ngcApiKey={"secure": CIPHERTEXT})
    stack = load_stack_config(read_stack_file(path))
    assert (stack.hf_token, stack.ngc_api_key) == ("[secret]", "[secret]")
    assert CIPHERTEXT not in stack.model_dump_json()


@pytest.mark.parametrize("value", [TOKEN, 12345, ["a"], {"secure": 1}, {"secure": "x", "extra": 1}])
def test_anything_but_a_pulumi_secret_is_refused(value):
    with pytest.raises(ConfigError) as raised:
        load_stack_config({"models": MODELS[:1], "hfToken": value})
    (line,) = raised.value.problems
    assert line.startswith("hfToken: ") and "pulumi config set --secret hfToken" in line
    assert TOKEN not in line


def test_render_writes_no_secret_and_no_credential(tmp_path):
    path = stack_file(tmp_path, models=MODELS, hfToken={"secure": CIPHERTEXT}, ngcApiKey={"secure": CIPHERTEXT})
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "components", "render", "--config", str(path), "--out", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    documents = [yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml"))]
    assert documents and not [d for d in documents if d["kind"] == "Secret"]
    text = "".join(p.read_text() for p in out.glob("*.yaml"))
    assert CIPHERTEXT not in text and "secure" not in text
    assert HF_TOKEN_SECRET.name in text and NGC_API_KEY_SECRET.name in text  # referenced by name only
    assert compile_stack(load_stack_config(read_stack_file(path))) == [yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml"))]


def test_secret_sections_are_the_fields_typed_as_stack_secrets():
    typed = {field.alias for field in StackConfig.model_fields.values() if StackSecret in getattr(field.annotation, "__args__", ())}
    assert typed == set(SECRET_SECTIONS) == {"hfToken", "ngcApiKey"}


def test_operator_path_uses_the_ngc_secret_but_an_hf_cache_needs_its_own():
    ngc = {"name": "op", "engine": "nim", "path": "operator", "image": NIM_IMAGE, "source": {"repo": "acme/nim"}}
    stack = load_stack_config({"models": [ngc], "ngcApiKey": {"secure": CIPHERTEXT}, "hfToken": {"secure": CIPHERTEXT}})
    (model,) = stack.models
    assert model.nim_settings.auth_secret == NGC_API_KEY_SECRET.name
    assert model.hf_token_secret is None  # the operator reads HF_TOKEN from authSecret, never hfTokenSecret
    hf_cache = {**ngc, "nim": {"cacheSource": "hf", "pullSecret": "ngc-registry"}}
    with pytest.raises(ConfigError) as raised:
        load_stack_config({"models": [hf_cache], "ngcApiKey": {"secure": CIPHERTEXT}})
    assert any(p.startswith("models.0.nim.authSecret:") for p in raised.value.problems)

