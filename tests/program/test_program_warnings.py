"""What the program warns of before it declares anything (components/program.py stack_warnings):
the stack secrets no model reads, and a router no model can register with (issue 38)."""

from __future__ import annotations

from components import program
from components.config import load_stack_config
from tests.support.builders import model

ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.18.0"}
PYLON = {"pylon": {"image": "nvcr.io/nvidia/stargate-client:0.18.0"}, "workerAuth": {"mode": "open"}}


def test_a_router_without_a_pylon_is_warned_of():
    warnings = program.stack_warnings(load_stack_config({"models": [model("chat")], "router": ROUTER}))
    assert len(warnings) == 1 and warnings[0].startswith("router llm-router: router.pylon is unset"), warnings
    assert program.stack_warnings(load_stack_config({"models": [model("chat")], "router": {**ROUTER, **PYLON}})) == []
    assert program.stack_warnings(load_stack_config({"models": [model("chat")]})) == []
