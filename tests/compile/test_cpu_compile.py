"""A CPU model (`gpus: 0`) renders vLLM's CPU server: its image, no GPU anywhere, the CPU settings
vLLM needs, and no GPU placement (components/compile/cpu.py, components/config/cpu.py). The whole
render of tests/fixtures/stacks/Pulumi.cpu.yaml is golden/cpu.yaml; these pin the behaviour."""

from __future__ import annotations

import json

import pytest

from contract.labels import DEVICE_LABEL
from tests.support.builders import compile_stack, compiled, container, env_of, fixture_stack, model, pod_manifests, pod_spec

CPU_IMAGE_011 = "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.11.0"
CPU_IMAGE_032 = "docker.io/vllm/vllm-openai-cpu:v0.32.0"
PLATFORM = {"sharedMemorySizeLimit": "1Gi", "gpuNodeSelector": {"pool": "gpu"},
            "gpuTolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


def cpu_model(**fields) -> dict:
    return model("tiny", gpus=0, **{"resources": {"cpu": "2", "memory": "8Gi"}, **fields})


def server(manifests) -> dict:
    return container(manifests.deployment, "server")


def of_model(name: str) -> list[dict]:
    return [m for m in compile_stack(fixture_stack("cpu")) if m["metadata"].get("labels", {}).get(
        "llm-serving.dev/model") == name]


def test_no_gpu_anywhere_in_a_cpu_models_objects():
    objects = of_model("qwen-cpu")
    assert objects and "nvidia.com/gpu" not in json.dumps(objects)
    # The GPU model beside it keeps its GPUs and the GPU pool's placement.
    gpu = json.dumps(of_model("llama"))
    assert '"nvidia.com/gpu": "1"' in gpu and '"nvidia.com/gpu.present": "true"' in gpu


def test_the_server_runs_the_cpu_image_with_requests_equal_to_limits():
    manifests = compiled(cpu_model(), **PLATFORM)
    assert server(manifests)["image"] == CPU_IMAGE_011
    assert server(manifests)["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"},
                                               "limits": {"cpu": "2", "memory": "8Gi"}}
    assert server(manifests)["command"] == ["vllm", "serve"]


@pytest.mark.parametrize("resources, kv_cache, threads", [
    ({"cpu": "2", "memory": "8Gi"}, "2", "2"),
    ({"cpu": "4", "memory": "32Gi"}, "14", "4"),
    ({"cpu": "2000m", "memory": "16Gi", "kvCache": "4Gi"}, "4", "2"),
])
def test_the_cpu_settings_come_from_the_resources(resources, kv_cache, threads):
    env = env_of(server(compiled(cpu_model(resources=resources), **PLATFORM)))
    assert env["VLLM_CPU_KVCACHE_SPACE"] == {"name": "VLLM_CPU_KVCACHE_SPACE", "value": kv_cache}
    assert env["OMP_NUM_THREADS"] == {"name": "OMP_NUM_THREADS", "value": threads}
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == {"name": "VLLM_CPU_OMP_THREADS_BIND", "value": "all"}
    # The CPU image has no passwd entry for uid 2000: torch's getpass.getuser() reads USER first.
    assert env["USER"] == {"name": "USER", "value": "vllm"}


@pytest.mark.parametrize("release, unbound", [("0.11", "all"), ("0.32", "nobind")])
def test_no_binding_is_said_in_the_lines_words(release, unbound):
    # 0.11 reads anything but `auto` and `all` as a core list: `nobind` would fail to parse there.
    env = env_of(server(compiled(cpu_model(), **PLATFORM, vllmRelease=release)))
    assert env["VLLM_CPU_OMP_THREADS_BIND"]["value"] == unbound


def test_a_gpu_server_gets_no_cpu_settings_and_no_cpu_limit():
    gpu = server(compiled(model("big", resources={"memory": "16Gi"}), **PLATFORM))
    assert not {"VLLM_CPU_KVCACHE_SPACE", "OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND"} & set(env_of(gpu))
    assert "cpu" not in gpu["resources"]["limits"]


def test_a_cpu_model_has_no_gpu_placement():
    manifests = compiled(cpu_model(), **PLATFORM)
    for manifest in pod_manifests([manifests.deployment, manifests.puller_job]):
        spec = pod_spec(manifest)
        assert not {"nodeSelector", "tolerations", "affinity"} & set(spec), manifest["kind"]


def test_a_cpu_models_own_placement_is_kept():
    manifests = compiled(cpu_model(nodeSelector={"pool": "cpu"},
                                   tolerations=[{"key": "ci", "operator": "Exists", "effect": "NoSchedule"}]),
                         **PLATFORM)
    for manifest in (manifests.deployment, manifests.puller_job):
        spec = pod_spec(manifest)
        assert spec["nodeSelector"] == {"pool": "cpu"}
        assert spec["tolerations"] == [{"key": "ci", "operator": "Exists", "effect": "NoSchedule"}]


def test_a_read_write_once_gpu_puller_is_still_held_to_gpu_nodes():
    # Without a node selector, a GPU model's RWO puller gets the GPU node affinity; a CPU model's not.
    gpu = compiled(model("big", resources={"memory": "16Gi"}), sharedMemorySizeLimit="1Gi")
    assert "affinity" in pod_spec(gpu.puller_job)
    cpu = compiled(cpu_model(), sharedMemorySizeLimit="1Gi")
    assert "affinity" not in pod_spec(cpu.puller_job)


def test_the_pullers_run_the_cpu_image_unless_the_platform_names_one():
    manifests = compiled(cpu_model(lora={"enabled": True, "adapters": [{"name": "tiny-lora", "repo": "acme/lora"}]}),
                         **PLATFORM)
    assert container(manifests.puller_job, "puller")["image"] == CPU_IMAGE_011
    assert container(manifests.deployment, "lora-cache-init")["image"] == CPU_IMAGE_011
    named = compiled(cpu_model(), **PLATFORM, pullerImage="registry.example.com/tools/hf:0.35.3")
    assert container(named.puller_job, "puller")["image"] == "registry.example.com/tools/hf:0.35.3"
    # Not the line's CPU image: a line move changes no puller (nothing re-pulled); a set CPU image is used.
    assert container(compiled(cpu_model(), **PLATFORM, vllmRelease="0.32").puller_job, "puller")["image"] == CPU_IMAGE_011
    own = compiled(cpu_model(), **PLATFORM, vllmCpuImage="registry.example.com/ml/vllm-cpu:v0.11.0")
    assert container(own.puller_job, "puller")["image"] == "registry.example.com/ml/vllm-cpu:v0.11.0"
    # A GPU model keeps the default puller image.
    gpu = compiled(model("big", resources={"memory": "16Gi"}), **PLATFORM)
    assert container(gpu.puller_job, "puller")["image"] == "docker.io/vllm/vllm-openai:v0.11.0"


def test_the_cpu_image_is_the_lines_or_the_platforms():
    assert server(compiled(cpu_model(), **PLATFORM, vllmRelease="0.32"))["image"] == CPU_IMAGE_032
    own = "registry.example.com/ml/vllm-cpu:v0.11.0"
    assert server(compiled(cpu_model(), **PLATFORM, vllmCpuImage=own))["image"] == own
    assert server(compiled(cpu_model(image=own), **PLATFORM))["image"] == own


def test_every_object_of_a_cpu_model_carries_the_device_label():
    objects = of_model("qwen-cpu")
    assert {o["metadata"]["labels"].get(DEVICE_LABEL) for o in objects} == {"cpu"}
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["metadata"]["labels"][DEVICE_LABEL] == "cpu"
    # Not in the selector, which never changes; and never on a GPU model (a new template label
    # would restart every deployed GPU server).
    assert DEVICE_LABEL not in deployment["spec"]["selector"]["matchLabels"]
    assert all(DEVICE_LABEL not in o["metadata"]["labels"] for o in of_model("llama"))
