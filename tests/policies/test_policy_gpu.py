"""GPU rules: /dev/shm in-memory volume with a size limit, and GPU limits on servers."""

from __future__ import annotations

import pytest

from policies.rules import gpu
from policies.rules.base import violations
from policies.rules.kube import K8sObject
from tests.support.policy_helpers import DELETE, Case, check_case, compliant, container, pod, put, run


def _dshm(world, model="llama"):
    (volume,) = [v for v in pod(world.server(model))["volumes"] if v["name"] == "dshm"]
    return volume


FAIL_CASES = [
    Case(gpu.shm_size_limit, "no sizeLimit", lambda w: _dshm(w)["emptyDir"].pop("sizeLimit"), "has no sizeLimit"),
    Case(gpu.shm_size_limit, "disk-backed shm", lambda w: _dshm(w)["emptyDir"].pop("medium"),
         "is not an in-memory emptyDir"),
    Case(gpu.shm_size_limit, "nothing mounted at /dev/shm",
         lambda w: container(w.server("qwen"), "server").__setitem__(
             "volumeMounts", [m for m in container(w.server("qwen"), "server")["volumeMounts"] if m["name"] != "dshm"]),
         "requests GPUs but mounts nothing at /dev/shm"),
    Case(gpu.shm_size_limit, "mount names a missing volume",
         lambda w: pod(w.server("qwen")).__setitem__(
             "volumes", [v for v in pod(w.server("qwen"))["volumes"] if v["name"] != "dshm"]),
         "mounts volume 'dshm' at /dev/shm, but the pod declares no such volume"),
    Case(gpu.shm_size_limit, "NIMService without sharedMemorySizeLimit",
         lambda w: put(w.one("NIMService"), "spec.storage.sharedMemorySizeLimit", DELETE),
         "spec.storage.sharedMemorySizeLimit is unset"),
    Case(gpu.nim_multinode_shape, "multiNode of one pipeline stage",
         lambda w: put(w.one("NIMService"), "spec.multiNode", {"parallelism": {"tensor": 1, "pipeline": 1}}),
         "spec.multiNode.parallelism.pipeline is 1"),
    Case(gpu.nim_multinode_shape, "multiNode tensor not the pod's GPUs",
         lambda w: put(w.one("NIMService"), "spec.multiNode", {"parallelism": {"tensor": 8, "pipeline": 2}}),
         "parallelism.tensor is 8 but each pod gets 1 GPUs"),
    Case(gpu.nim_multinode_shape, "multiNode with args the LWS leaves out",
         lambda w: [put(w.one("NIMService"), "spec.multiNode", {"parallelism": {"tensor": 1, "pipeline": 2}}),
                    put(w.one("NIMService"), "spec.args", ["--x"])],
         "spec.args is set, but the operator's LeaderWorkerSet leaves it out"),
    Case(gpu.gpu_limits, "server without any GPU",
         lambda w: [container(w.server("qwen"), "server")["resources"][k].pop("nvidia.com/gpu") for k in ("requests", "limits")],
         "is a model server with no nvidia.com/gpu limit"),
    Case(gpu.gpu_limits, "GPU request without limit",
         lambda w: container(w.server("qwen"), "server")["resources"]["limits"].pop("nvidia.com/gpu"),
         "requests 1 nvidia.com/gpu but sets no limit"),
    Case(gpu.gpu_limits, "request and limit differ",
         lambda w: container(w.server("llama"), "server")["resources"]["limits"].update({"nvidia.com/gpu": "1"}),
         "requests 2 nvidia.com/gpu but limits 1"),
    Case(gpu.gpu_limits, "fractional GPU",
         lambda w: container(w.server("qwen"), "server")["resources"]["limits"].update({"nvidia.com/gpu": "0.5"}),
         "is not a whole number of GPUs"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


@pytest.mark.parametrize("rule", [gpu.shm_size_limit, gpu.gpu_limits], ids=lambda r: r.name)
def test_compiled_stack_passes(rule):
    assert run(rule, compliant()) == []


def test_pods_without_gpus_need_no_shm():
    world = compliant()
    for component in ("router", "backend-router"):
        assert gpu.shm_size_limit(K8sObject.from_manifest(world.one("Deployment", component))) == []
    # The puller requests no GPU either.
    assert gpu.shm_size_limit(K8sObject.from_manifest(world.puller("llama"))) == []


def test_gpu_limit_counts_engine_numbers():
    # The engine sends every number as a float: 2.0 equals the string "2".
    world = compliant()
    container(world.server("llama"), "server")["resources"]["limits"]["nvidia.com/gpu"] = 2.0
    assert not violations(gpu.gpu_limits(K8sObject.from_manifest(world.server("llama"))))


def test_gpu_resource_name_is_pack_config():
    world = compliant()
    found = violations(gpu.gpu_limits(K8sObject.from_manifest(world.server("qwen")), {"gpuResourceName": "amd.com/gpu"}))
    assert "no amd.com/gpu limit" in found[0].message


def test_a_compiled_multi_node_nimservice_has_the_operators_shape():
    from components.compile import nim
    from tests.support.builders import model, stack

    raw = model("r1", engine="nim", path="operator", image="nvcr.io/nim/deepseek-ai/deepseek-r1:1.7.3",
                nim={"authSecret": "ngc-api"}, gpus=8, tensorParallelSize=8,
                weights={"accessMode": "ReadWriteMany", "size": "1Ti"}, multiNode={"nodes": 2, "mode": "mpi"})
    config = stack(raw)
    service = nim.compile_nim_operator(config.models[0], config).service
    findings = list(gpu.nim_multinode_shape(K8sObject.from_manifest(service), {"gpuResourceName": "nvidia.com/gpu"}))
    assert findings == [], [f.message for f in findings]
