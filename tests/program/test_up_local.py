"""What scripts/up-local.sh reads of the local stack (scripts/localmodel/local_stack.py): the Hub
stand-in's endpoint and repositories, and the stack without its router for a clone without the
Stargate sources (the user's stack file untouched)."""

from __future__ import annotations

import copy

import pytest
import yaml

from components.config import load_stack_config, read_stack_file
from scripts.localmodel import local_stack
from tests.support.builders import ROOT

STACK = ROOT / "stacks" / "Pulumi.local.yaml"


def test_the_hub_serves_the_repository_the_local_model_names_where_the_stack_pulls_from():
    (model,) = read_stack_file(STACK)["models"]
    endpoint = read_stack_file(STACK)["platform"]["hfEndpoint"]
    assert local_stack.hub(STACK) == f"{endpoint} {model['source']['repo']}"
    assert endpoint.startswith(f"http://{local_stack.NODE_BRIDGE}:")


def write(tmp_path, document: dict):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_no_model_pulling_from_the_bridge_needs_no_hub_and_two_endpoints_are_refused(tmp_path):
    document = yaml.safe_load(STACK.read_text())
    elsewhere = copy.deepcopy(document)
    elsewhere["config"]["llm-serving:platform"]["hfEndpoint"] = "https://hf-mirror.example.com"
    assert local_stack.hub(write(tmp_path, elsewhere)) == ""
    two = copy.deepcopy(document)
    second = {**two["config"]["llm-serving:models"][0], "name": "second", "hfEndpoint": "http://10.88.0.1:9999"}
    two["config"]["llm-serving:models"].append(second)
    with pytest.raises(SystemExit, match="one hfEndpoint"):
        local_stack.hub(write(tmp_path, two))


def test_without_the_router_the_rest_of_the_stack_is_what_the_file_says(tmp_path):
    before = STACK.read_text()
    out = tmp_path / "up-local" / "Pulumi.local.yaml"
    local_stack.without_router(STACK, out)
    assert STACK.read_text() == before
    written, shipped = read_stack_file(out), read_stack_file(STACK)
    assert "router" not in written and "router" in shipped
    assert written == {key: value for key, value in shipped.items() if key != "router"}
    assert yaml.safe_load(out.read_text())["encryptionsalt"] == yaml.safe_load(before)["encryptionsalt"]
    stack = load_stack_config(written)
    assert stack.router is None and [m.name for m in stack.models] == ["tiny-chat"]
