"""CPU servers (label llm-serving.dev/device: cpu): no GPU, and the CPU settings vLLM's CPU server
needs; every other server is held to its GPUs (test_policy_gpu.py). One mutation per case of the
compliant world's CPU model (`qwen-cpu`)."""

from __future__ import annotations

import pytest

from policies.rules import cpu, gpu
from policies.rules.base import violations
from policies.rules.kube import K8sObject
from tests.support.policy_helpers import Case, check_case, compliant, container, run

CPU_MODEL = "qwen-cpu"


def _server(world):
    return container(world.server(CPU_MODEL), "server")


def _env(world, name, value=None):
    entries = _server(world)["env"]
    if value is None:
        _server(world)["env"] = [e for e in entries if e["name"] != name]
    else:
        next(e for e in entries if e["name"] == name)["value"] = value


def _unlabel(world):
    deployment = world.server(CPU_MODEL)
    for labels in (deployment["metadata"]["labels"], deployment["spec"]["template"]["metadata"]["labels"]):
        labels.pop("llm-serving.dev/device")


FAIL_CASES = [
    Case(cpu.cpu_server_settings, "asks for a GPU",
         lambda w: _server(w)["resources"]["limits"].update({"nvidia.com/gpu": "1"}), "asks for nvidia.com/gpu"),
    Case(cpu.cpu_server_settings, "no CPU limit", lambda w: _server(w)["resources"]["limits"].pop("cpu"),
         "has CPU limit None"),
    Case(cpu.cpu_server_settings, "fractional CPU limit",
         lambda w: _server(w)["resources"]["limits"].update({"cpu": "1500m"}), "to a whole number of CPUs"),
    Case(cpu.cpu_server_settings, "request and limit differ",
         lambda w: _server(w)["resources"]["requests"].update({"cpu": "1"}), "requests 1 CPUs but limits 2"),
    Case(cpu.cpu_server_settings, "threads beyond the limit", lambda w: _env(w, "OMP_NUM_THREADS", "8"),
         "set OMP_NUM_THREADS to 2"),
    Case(cpu.cpu_server_settings, "no thread count", lambda w: _env(w, "OMP_NUM_THREADS"),
         "OMP_NUM_THREADS=None"),
    Case(cpu.cpu_server_settings, "no binding setting", lambda w: _env(w, "VLLM_CPU_OMP_THREADS_BIND"),
         "sets no VLLM_CPU_OMP_THREADS_BIND"),
    Case(cpu.cpu_server_settings, "no KV cache size", lambda w: _env(w, "VLLM_CPU_KVCACHE_SPACE"),
         "sizes its KV cache from the node's memory"),
    Case(cpu.cpu_server_settings, "KV cache not in whole GiB", lambda w: _env(w, "VLLM_CPU_KVCACHE_SPACE", "2.5"),
         "sizes its KV cache from the node's memory"),
    Case(cpu.cpu_server_settings, "KV cache as big as the memory", lambda w: _env(w, "VLLM_CPU_KVCACHE_SPACE", "8"),
         "not below its memory limit"),
    # The label decides which rule holds a server: without it, a GPU-less server is a GPU server
    # with no GPU.
    Case(gpu.gpu_limits, "CPU server without its device label", _unlabel, "is a model server with no nvidia.com/gpu"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


def test_compiled_stack_passes():
    assert run(cpu.cpu_server_settings, compliant()) == []


def test_gpu_servers_are_not_cpu_servers():
    world = compliant()
    for model in ("llama", "qwen"):
        assert cpu.cpu_server_settings(K8sObject.from_manifest(world.server(model))) == []


def test_the_gpu_limit_rule_leaves_the_cpu_server_to_this_rule():
    world = compliant()
    assert violations(gpu.gpu_limits(K8sObject.from_manifest(world.server(CPU_MODEL)))) == []
    assert violations(cpu.cpu_server_settings(K8sObject.from_manifest(world.server(CPU_MODEL)))) == []


def test_engine_numbers_are_read_as_quantities():
    # The engine sends numbers as floats: a CPU limit of 2.0 is 2 CPUs.
    world = compliant()
    _server(world)["resources"]["limits"]["cpu"] = 2.0
    _server(world)["resources"]["requests"]["cpu"] = "2000m"
    assert violations(cpu.cpu_server_settings(K8sObject.from_manifest(world.server(CPU_MODEL)))) == []
