"""Pulumi.yaml's `config:` block (issue 33): what it declares to the engine agrees with the config
model and with every stack file, and the defaults it puts into a stack that leaves a section out
mean exactly "left out". The engine's own behaviour (types refused, default providers denied,
plain-text secrets) is tested under the real CLI: tests/integration/test_project_config_on_engine.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.config.loader import PROJECT, SECTIONS, load_stack_config, read_stack_file
from components.config.stack_secrets import SECRET_SECTIONS

REPO = Path(__file__).resolve().parents[2]
DECLARED = yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"]
STACK_FILES = sorted((REPO / "stacks").glob("Pulumi.*.yaml"))
# The project's own keys (Pulumi treats `models` and `llm-serving:models` alike).
OWN = {key.removeprefix(f"{PROJECT}:"): spec for key, spec in DECLARED.items()
       if ":" not in key or key.startswith(f"{PROJECT}:")}


def _matches(value, spec: dict) -> bool:
    """Pulumi's check of a stack value against a declared type (workspace.ValidateConfigValue)."""
    kind = spec["type"]
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list) and all(_matches(item, spec["items"]) for item in value)
    if kind == "string":
        return isinstance(value, str)
    raise AssertionError(f"no check here for type {kind}")


def test_declared_keys_are_sections_the_program_reads():
    assert set(OWN) <= set(SECTIONS)
    for key, spec in OWN.items():
        assert spec.get("type") and spec.get("description"), key


def test_every_declared_section_has_a_default_meaning_left_out():
    # A declared key without a default is required by the engine ("Stack 'x' is missing
    # configuration value"): every section is optional in the model, so each needs one, and the
    # engine writes it into every stack that leaves the section out.
    nothing = load_stack_config({})
    for key, spec in OWN.items():
        assert "default" in spec, key
        assert _matches(spec["default"], spec), key
        assert load_stack_config({key: spec["default"]}) == nothing, key


def test_optional_sections_without_such_a_default_are_not_declared():
    # `router`: only its absence means "no router"; the stack secrets: a typed `secret: true` key
    # is required by the engine, and a default would be a plain value the engine refuses.
    assert "router" not in OWN
    assert not set(SECRET_SECTIONS) & set(OWN)


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.stem.removeprefix("Pulumi."))
def test_every_stack_file_has_the_declared_types(path):
    raw = read_stack_file(path)
    for key, spec in OWN.items():
        if key in raw:
            assert _matches(raw[key], spec), (path.name, key)
    load_stack_config(raw)


def test_default_providers_are_disabled_for_kubernetes_only():
    # Not `*`: the dynamic resources run on the engine's default `pulumi-python` provider.
    assert DECLARED["pulumi:disable-default-providers"] == {"value": ["kubernetes"]}


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.stem.removeprefix("Pulumi."))
def test_no_stack_configures_a_default_provider(path):
    # `kubernetes:*` keys configure only the default Kubernetes provider, which is disabled: the
    # program's provider reads llm-serving:cluster.
    keys = (yaml.safe_load(path.read_text()) or {}).get("config", {})
    assert [key for key in keys if key.startswith("kubernetes:")] == []
