"""Credential-shaped values in plain fields (issue 25 item 4): refused at their path with the
secret-based setting to use, and never echoed, whatever field they sit in."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config, read_stack_file
from components.config.secret_values import credential_shape
from tests.support.builders import ROOT, STACK_FIXTURES, model, nim_model

ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.6.0"}
PYLON = {"image": "nvcr.io/nvidia/stargate-client:0.17.0"}

# Made-up values in each credential's published shape.
CREDENTIALS = {
    "hub": ("hf_" + "QxWvErTyUiOpAsDfGhJkLzXcVbNm123456", "Hugging Face token", "hfTokenSecret"),
    "ngc": ("nvapi-" + "Zq8x_Kd02-" * 6, "NGC API key", "nim.authSecret"),
    "aws-id": ("AKIA" + "Q7RZ3XJ5WVTK2M4P", "AWS access key id", "workload identity"),
    "aws-secret": ("wJalrXUtnF" + "EMI/K7MDENG/bPxRfiCY" + "ZzQxWvEr12", "AWS secret access key", "workload identity"),
    "gcp": ('{"type": "service_account", "private_key_id": "abc"}', "Google Cloud service-account key",
            "workload identity"),
    "pem": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow", "private key", "router.tls.existingSecret"),
    "github": ("ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2, "GitHub token", "Kubernetes Secret"),
    "bearer": ("Bearer " + "q8Zt3LmN0pR5sV7wX9yB2cD4", "bearer token", "Kubernetes Secret"),
}


def where(field: str, value: str) -> tuple[dict, str]:
    """(stack sections, path) with ``value`` in ``field``."""
    return {
        "env": ({"models": [model(env={"MY_SETTING": value})]}, "models.0.env.MY_SETTING"),
        "args": ({"models": [model(args=["--enforce-eager", f"--api-key={value}"])]}, "models.0.args.1"),
        "nim-env": ({"models": [nim_model(env={"NIM_LOG": value})]}, "models.0.env.NIM_LOG"),
        "node-selector": ({"models": [model(nodeSelector={"pool": value})]}, "models.0.nodeSelector.pool"),
        "metrics-labels": ({"platform": {"metrics": {"labels": {"team": value}}}}, "platform.metrics.labels.team"),
        "toleration": ({"platform": {"gpuTolerations": [{"key": "k", "operator": "Equal", "value": value}]}},
                       "platform.gpuTolerations.0.value"),
        "router-env": ({"models": [model()], "router": {**ROUTER, "env": {"X": value}}}, "router.env.X"),
        "router-args": ({"models": [model()], "router": {**ROUTER, "args": [value]}}, "router.args.0"),
        "pylon-args": ({"models": [model()], "router": {**ROUTER, "pylon": {**PYLON, "args": [value]},
                                                        "workerAuth": {"mode": "open"}}}, "router.pylon.args.0"),
        "label-key": ({"platform": {"gpuNodeSelector": {value: "x"}}}, "platform.gpuNodeSelector (one of its keys)"),
    }[field]


FIELDS = ("env", "args", "nim-env", "node-selector", "metrics-labels", "toleration", "router-env",
          "router-args", "pylon-args", "label-key")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
def test_a_credential_in_any_plain_field_is_refused_unechoed(kind, field):
    value, what, fix = CREDENTIALS[kind]
    raw, path = where(field, value)
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    lines = caught.value.problems
    assert any(line.startswith(f"{path}: holds what looks like a") and what in line and fix in line
               for line in lines), lines
    text = "\n".join(lines)
    assert value not in text
    # Not even the distinctive part of it.
    assert value.splitlines()[0][-12:] not in text


@pytest.mark.parametrize("text", [
    "0123456789abcdef0123456789abcdef01234567",  # a full commit id (revision)
    "docker.io/vllm/vllm-openai:v0.11.0@sha256:" + "ab" * 32,
    "meta-llama/Llama-3.1-8B-Instruct", "hf_transfer", "nvapi", "--max-model-len=8192",
    "AKIA", "sk-learn", "http://hf-mirror.mirrors.svc:8080", "hf-internal-testing/tiny-random-gpt2",
])
def test_ordinary_values_are_not_credentials(text):
    assert credential_shape(text) is None


def test_every_shipped_and_fixture_stack_still_validates():
    paths = [*sorted((ROOT / "stacks").glob("Pulumi.*.yaml")), *sorted(STACK_FIXTURES.glob("Pulumi.*.yaml"))]
    loaded = [load_stack_config(read_stack_file(path)) for path in paths if "policy-bad" not in path.name]
    assert len(loaded) >= 5 and all(stack.models for stack in loaded)


def test_the_stack_secrets_themselves_are_left_to_their_own_check():
    """`hfToken` as a Pulumi secret is the right place; in plain text it gets the stack-secret fix."""
    token = CREDENTIALS["hub"][0]
    load_stack_config({"hfToken": {"secure": "v1:abc"}, "models": [model()]})
    with pytest.raises(ConfigError) as caught:
        load_stack_config({"hfToken": token, "models": [model()]})
    (line,) = caught.value.problems
    assert line.startswith("hfToken: is stored in plain text") and token not in line
