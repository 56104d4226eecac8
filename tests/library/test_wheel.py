"""The wheel a team installs: built from this checkout, installed outside it, it imports, knows
its version, carries the files the compilers read (the gateway's njs scripts, the vLLM lines'
facts) and the PEP 561 marker, and declares dependency ranges that hold requirements.txt's lock (a
team's program pins its own versions; the stack program keeps the lock)."""

from __future__ import annotations

import json
import subprocess
import zipfile

import pytest
from packaging.requirements import Requirement

import llm_serving
from testkit.harness import REPO
from tests.support.wheel import build_wheel, venv_with

pytestmark = pytest.mark.servers  # builds a wheel and a virtualenv (~10 s), starts no server

PROBE = r'''
import importlib.metadata, json, llm_serving, components, providers.gate
from components.config import load_stack_config
from components.compile.plan import compile_stack
from components.config.vllm_release import load_facts
stack = load_stack_config({"platform": {"namespace": "team-a", "preflight": {"enabled": False}},
    "models": [{"name": "chat", "source": {"repo": "acme/tiny-llm"}, "resources": {"memory": "24Gi"}}],
    "router": {"image": "registry.example.com/llm/request-router:0.16.2"}})
manifests = compile_stack(stack)
scripts = [m for m in manifests if m["kind"] == "ConfigMap" and any(k.endswith(".js") for k in m.get("data", {}))]
print(json.dumps({"files": [llm_serving.__file__, components.__file__, providers.gate.__file__],
                  "version": llm_serving.__version__, "metadata": importlib.metadata.version("llm-serving"),
                  "requires": importlib.metadata.requires("llm-serving"), "gateway_scripts": len(scripts),
                  "line": bool(load_facts("0.32"))}))
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(base)
    return wheel, venv_with(wheel, base / "venv")


def test_the_installed_wheel_imports_and_compiles_outside_the_checkout(installed, tmp_path):
    wheel, python = installed
    result = subprocess.run([str(python), "-c", PROBE], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    venv = python.parent.parent
    assert all(path.startswith(str(venv)) for path in found["files"]), found["files"]
    assert found["version"] == found["metadata"] == llm_serving.__version__
    assert found["gateway_scripts"] >= 1 and found["line"]
    locked = dict(line.strip().split("==", 1) for line in (REPO / "requirements.txt").read_text().splitlines()
                  if line.strip() and not line.startswith("#") and not line.startswith("pulumi-policy"))
    ranges = {Requirement(spec).name: Requirement(spec).specifier for spec in found["requires"]}
    assert sorted(ranges) == sorted(locked), "the library's dependencies are not the program's"
    for name, version in locked.items():
        assert ranges[name].contains(version), f"{name}=={version} (requirements.txt) is outside {ranges[name]}"
        assert "==" not in str(ranges[name]), f"{name}: a pin, not a range ({ranges[name]})"

def test_the_wheel_holds_the_packages_and_nothing_of_the_checkout_beside_them(installed):
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names if not name.startswith("llm_serving-")}
    assert tops == {"llm_serving", "components", "contract", "providers"}
    assert "components/compile/gateway/gateway.js" in names
    assert "components/config/vllm_lines/0.32.json" in names
    assert "llm_serving/py.typed" in names
    assert not [n for n in names if "/tests/" in n or n.startswith(("tests/", "stacks/", "policies/"))]
