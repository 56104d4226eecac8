"""CPU models (`gpus: 0`, components/config/cpu.py): what vLLM's CPU server cannot do is refused at
the field with the fix; the KV cache, threads and image they get; CPU-only settings on a GPU model."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from components.config import cpu as cpu_config
from components.config.platform import cpu_image
from components.config.vllm_checks import line_of
from tests.support.builders import model, nim_model


def cpu_model(name: str = "tiny", **fields) -> dict:
    return model(name, gpus=0, **{"resources": {"cpu": "2", "memory": "8Gi"}, **fields})


def load(*models: dict, **platform) -> object:
    raw: dict = {"models": list(models), "platform": {"sharedMemorySizeLimit": "1Gi", **platform}}
    return load_stack_config(raw)


def problems_of(*models: dict, **platform) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(*models, **platform)
    return caught.value.problems


STREAMED = {"type": "s3", "load": "stream", "bucket": "models", "prefix": "tiny/", "credentials": {"secret": "store"}}

REFUSED = [
    ("nim", nim_model("n", gpus=0, resources={"cpu": "2", "memory": "8Gi"}), "models.0.gpus",
     "NIM images serve on GPUs only"),
    ("multi-node", cpu_model(weights={"accessMode": "ReadWriteMany"}, multiNode={"nodes": 2}), "models.0.multiNode",
     "spans no nodes"),
    ("tensor-parallel", cpu_model(tensorParallelSize=2), "models.0.tensorParallelSize", "one engine per pod"),
    ("ray", cpu_model(args=["--distributed-executor-backend", "ray"]), "models.0.args.0", "never on Ray"),
    ("ray-one-word", cpu_model(args=["--max-model-len=2048", "--distributed-executor-backend=ray"]), "models.0.args.1",
     "never on Ray"),
    ("pipeline-parallel", cpu_model(args=["-pp", "2"]), "models.0.args.0", "one engine per pod"),
    ("data-parallel", cpu_model(args=["--data-parallel-size 2"]), "models.0.args.0", "one engine per pod"),
    ("gpu-memory-utilization", cpu_model(args=["--gpu-memory-utilization", "0.5"]), "models.0.args.0",
     "has no effect on the CPU server"),
    ("gguf-load-format", cpu_model(args=["--load-format", "GGUF"]), "models.0.args.0", "no GGUF kernels"),
    ("gguf-quantization", cpu_model(args=["--quantization=gguf"]), "models.0.args.0", "no GGUF kernels"),
    ("kv-cache-env", cpu_model(env={"VLLM_CPU_KVCACHE_SPACE": "8"}), "models.0.env.VLLM_CPU_KVCACHE_SPACE",
     "resources.kvCache"),
    ("threads-env", cpu_model(env={"OMP_NUM_THREADS": "8"}), "models.0.env.OMP_NUM_THREADS", "set resources.cpu"),
    ("bind-env", cpu_model(env={"VLLM_CPU_OMP_THREADS_BIND": "0-3"}), "models.0.env.VLLM_CPU_OMP_THREADS_BIND",
     "set to no binding"),
    ("fractional-cpu", cpu_model(resources={"cpu": "1500m", "memory": "8Gi"}), "models.0.resources.cpu",
     "write a whole number of CPUs, e.g. '1'"),
    ("less-than-a-cpu", cpu_model(resources={"cpu": "500m", "memory": "8Gi"}), "models.0.resources.cpu",
     "e.g. '1'"),
    ("memory-too-small", cpu_model(resources={"cpu": "2", "memory": "4Gi"}), "models.0.resources.memory",
     "set at least 5Gi"),
    ("kv-cache-not-whole", cpu_model(resources={"cpu": "2", "memory": "8Gi", "kvCache": "1536Mi"}),
     "models.0.resources.kvCache", "whole GiB"),
    ("kv-cache-too-big", cpu_model(resources={"cpu": "2", "memory": "8Gi", "kvCache": "6Gi"}),
     "models.0.resources.kvCache", "leaves less than 3Gi"),
    ("kv-cache-on-gpu", model("g", resources={"memory": "16Gi", "kvCache": "4Gi"}), "models.0.resources.kvCache",
     "CPU models (gpus: 0) only"),
    ("cpu-env-on-gpu", model("g", resources={"memory": "16Gi"}, env={"VLLM_CPU_KVCACHE_SPACE": "4"}),
     "models.0.env.VLLM_CPU_KVCACHE_SPACE", "read by vLLM's CPU backend only"),
    ("stream-on-upstream-cpu-image",
     cpu_model(source=STREAMED),
     "models.0.source.load", "does not ship"),
]


@pytest.mark.parametrize("raw, path, fragment", [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_what_the_cpu_server_cannot_do_is_refused_at_its_field(raw, path, fragment):
    problems = problems_of(raw)
    at_path = [p for p in problems if p.startswith(f"{path}: ")]
    assert at_path, f"no problem reported at {path!r}; got {problems}"
    assert any(fragment in p for p in at_path), f"{fragment!r} not in {at_path}"


def test_a_multi_node_cpu_model_gets_only_the_cpu_refusal():
    # The GPU arithmetic of multiNode (tensor × pipeline = nodes × gpus) says nothing to a CPU model.
    problems = problems_of(cpu_model(weights={"accessMode": "ReadWriteMany"}, multiNode={"nodes": 2}))
    assert [p.split(":")[0] for p in problems] == ["models.0.multiNode"], problems


def test_a_cpu_model_with_lora_autoscaling_and_replicas_is_valid():
    config = load(cpu_model(lora={"enabled": True}, replicas=2, weights={"accessMode": "ReadWriteMany"},
                            args=["--max-model-len", "2048", "--load-format", "safetensors"],
                            env={"VLLM_CPU_CI_ENV": "1"}))
    (tiny,) = config.models
    assert tiny.on_cpu


@pytest.mark.parametrize("memory, kv_cache, expected", [
    ("5Gi", None, 1), ("8Gi", None, 2), ("9Gi", None, 3), ("32Gi", None, 14), ("64Gi", None, 30),
    ("8Gi", "5Gi", 5), ("16Gi", "2Gi", 2),
])
def test_kv_cache_is_half_the_memory_beyond_the_runtime_headroom(memory, kv_cache, expected):
    resources = {"cpu": "2", "memory": memory, **({"kvCache": kv_cache} if kv_cache else {})}
    (tiny,) = load(cpu_model(resources=resources)).models
    assert cpu_config.kv_cache_gib(tiny.resources.memory, tiny.resources.kv_cache) == expected


@pytest.mark.parametrize("cpu, threads", [("1", 1), ("4", 4), ("2000m", 2), (8, 8)])
def test_threads_are_the_whole_cpus(cpu, threads):
    (tiny,) = load(cpu_model(resources={"cpu": cpu, "memory": "8Gi"})).models
    assert cpu_config.threads(tiny.resources.cpu) == threads


def test_the_cpu_image_follows_the_platforms_line():
    assert cpu_image(load(cpu_model()).platform) == "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.11.0"
    config = load(cpu_model(), vllmRelease="0.32")
    assert cpu_image(config.platform) == "docker.io/vllm/vllm-openai-cpu:v0.32.0"
    # The line a GPU image's tag names is the CPU image's too.
    config = load(cpu_model(), vllmImage="docker.io/vllm/vllm-openai:v0.32.0")
    assert cpu_image(config.platform) == "docker.io/vllm/vllm-openai-cpu:v0.32.0"
    assert line_of(config.models[0], config.platform).name == "0.32"


def test_a_cpu_image_of_another_line_is_refused():
    problems = problems_of(cpu_model(), vllmCpuImage="docker.io/vllm/vllm-openai-cpu:v0.32.0")
    assert any(p.startswith("platform.vllmCpuImage: ") and "set vllmRelease to the image's line" in p
               for p in problems), problems


def test_a_cpu_image_without_a_version_runs_the_platforms_line():
    config = load(cpu_model(), vllmRelease="0.32", vllmCpuImage="registry.example.com/ml/vllm-cpu:build-7")
    assert line_of(config.models[0], config.platform).name == "0.32"
    # So its args are checked by 0.32's parser: a flag 0.32 removed is refused.
    problems = problems_of(cpu_model(args=["--enable-lora-bias"]), vllmRelease="0.32",
                           vllmCpuImage="registry.example.com/ml/vllm-cpu:build-7")
    assert any(p.startswith("models.0.args.0: ") for p in problems), problems


def test_a_streamed_cpu_model_on_its_own_image_is_valid():
    (streamed,) = load(cpu_model(source=STREAMED, image="registry.example.com/ml/vllm-cpu-runai:v0.32.0",
                                 vllmRelease="0.32")).models
    assert streamed.on_cpu and streamed.source.streams
