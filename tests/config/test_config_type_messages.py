"""A value of the wrong type gets the hint of the shape its field expects (issue 25 item 5):
mapping, list, duration, quantity, whole number, text and true/false each say what to write, with
an example and what was given. "Quote it" is advice for text only: a mapping given for text is
not fixed by quoting, and a duration quoted without its unit would fail a second time."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from tests.support.builders import model

ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.6.0"}


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    return caught.value.problems


@pytest.mark.parametrize(("raw", "path", "hint", "got"), [
    # mapping: a section, and a free label map
    ({"platform": ["llm-serving"]}, "platform", "must be a mapping: `key: value` lines", "a list"),
    ({"models": [model(source="acme/tiny")]}, "models.0.source", "must be a mapping", "text"),
    ({"platform": {"gpuNodeSelector": "gpu=a100"}}, "platform.gpuNodeSelector", "{key: value} on one line", "text"),
    # list
    ({"models": [model(args="--enforce-eager")]}, "models.0.args", "a single entry too: [a]", "text"),
    ({"models": {"name": "chat"}}, "models", "one `- item` per line", "a mapping"),
    # duration: a bare number, and the same number quoted
    ({"platform": {"metrics": {"interval": 30}}}, "platform.metrics.interval", "duration with its unit, e.g. 30s",
     "a number"),
    # quantity
    ({"models": [model(resources={"memory": {"request": "16Gi"}})]}, "models.0.resources.memory",
     "must be a quantity: a number with an optional unit, e.g. '16Gi'", "a mapping"),
    # integer
    ({"models": [model(gpus={"count": 2})]}, "models.0.gpus", "whole number without quotes, e.g. 2", "a mapping"),
    ({"models": [model(gpus=[2])]}, "models.0.gpus", "whole number without quotes, e.g. 2", "a list"),
    # text: quoting is the fix for a number, not for a mapping
    ({"models": [model(name=12)]}, "models.0.name", "quote it if it looks like a number", "a number"),
    ({"models": [model(env={"LEVEL": {"x": 1}})]}, "models.0.env.LEVEL", "must be text on the same line", "a mapping"),
    # true/false: a quoted flag is refused rather than read by pydantic's lax rules ('yes' -> true)
    ({"models": [model(lora={"enabled": "yes"})]}, "models.0.lora.enabled", "true or false without quotes", "text"),
    ({"platform": {"pin": 1}}, "platform.pin", "true or false without quotes", "a number"),
])
def test_each_shape_has_its_own_hint(raw, path, hint, got):
    lines = problems_of(raw)
    assert any(line.startswith(f"{path}:") and hint in line and f"got {got}" in line for line in lines), lines


def test_a_quoted_bare_duration_says_the_unit_is_missing():
    (line,) = problems_of({"platform": {"metrics": {"interval": "30"}}})
    assert line.startswith("platform.metrics.interval:") and "30s" in line


def test_the_mapping_hint_never_says_quote_it():
    lines = problems_of({"platform": {"networkPolicy": {"allowFrom": [{"podSelector": "app=prometheus"}]}}})
    (line,) = [line for line in lines if line.startswith("platform.networkPolicy.allowFrom.0.podSelector:")]
    assert "mapping" in line and "quote" not in line


def test_a_wrong_type_never_echoes_the_value():
    secretish = {"nested": "hf_" + "x" * 34}
    lines = problems_of({"models": [model(gpus=secretish)], "router": {**ROUTER, "replicas": secretish}})
    assert lines and not any("hf_" in line for line in lines), lines
