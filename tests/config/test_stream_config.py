"""`source.load: stream` (issue 23 item 5): what a streamed s3 source accepts, and each refusal
names the key of the stack file and the fix."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config

STREAM = {"type": "s3", "load": "stream", "bucket": "models", "prefix": "llama/",
          "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "k"}}


def one(source: dict = STREAM, **fields):
    return load_stack_config({"models": [{"name": "m", "source": source, **fields}]}).models[0]


def refusal(**fields) -> str:
    source = fields.pop("source", STREAM)
    with pytest.raises(ConfigError) as caught:
        one(source, **fields)
    return str(caught.value)


def test_copy_is_the_default_and_stream_is_a_setting():
    copied = one({**STREAM, "load": "copy"})
    assert not copied.streams and one({k: v for k, v in STREAM.items() if k != "load"}).source.load == "copy"
    streamed = one()
    assert streamed.streams and streamed.source.stream_memory_limit == "4Gi"
    # The identity is the location (and preview's listing), not how it is loaded.
    assert streamed.source.ref == copied.source.ref


def test_a_streamed_model_may_run_several_replicas_without_a_shared_volume():
    # No volume: the ReadWriteOnce rules of the weights volume do not apply.
    assert one(replicas=3).replicas == 3
    scaled = load_stack_config({"platform": {"metrics": {"enabled": True}}, "models": [{
        "name": "m", "source": STREAM, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 3}}]})
    assert scaled.models[0].autoscaling.max_replicas == 3


@pytest.mark.parametrize("fields, line", [
    ({"engine": "nim", "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3"},
     "models.0.source.load: stream is vLLM's loader (--load-format runai_streamer); NIM reads its weights "
     "from a volume: use load: copy"),
    ({"gpus": 2, "multiNode": {"nodes": 2}},
     "models.0.multiNode: vLLM 0.11 copies the config files into a folder of the pod that starts the server "
     "only"),
    ({"lora": {"enabled": True}},
     "models.0.lora.enabled: LoRA adapters are re-based onto the weights path, and a streamed model has none"),
    ({"weights": {"size": "40Gi"}}, "models.0.weights.size: a streamed model has no weights volume; remove weights.size"),
    ({"weights": {"accessMode": "ReadWriteMany"}},
     "models.0.weights.accessMode: a streamed model has no weights volume; remove weights.accessMode"),
    ({"resources": {"memory": "6Gi"}},
     "models.0.source.streamMemoryLimit: 4Gi is more than half of resources.memory (6Gi)"),
    ({"args": ["--load-format", "safetensors"]},
     "models.0.args.0: --load-format is managed by this program: set by source.load: stream"),
    ({"args": ["--model-loader-extra-config={\"concurrency\": 8}"]},
     "models.0.args.0: --model-loader-extra-config is managed by this program"),
    ({"env": {"AWS_ENDPOINT_URL": "http://other:9000"}},
     "models.0.env.AWS_ENDPOINT_URL: is set by this program: set from the s3 source"),
    ({"env": {"RUNAI_STREAMER_MEMORY_LIMIT": "1"}},
     "models.0.env.RUNAI_STREAMER_MEMORY_LIMIT: is set by this program: set source.streamMemoryLimit"),
])
def test_what_a_stream_cannot_have_is_refused_with_the_fix(fields, line):
    assert line in refusal(**fields)


def test_stream_settings_on_a_copied_source_are_refused():
    line = "models.0.source.streamMemoryLimit: applies to load: stream only; remove it"
    assert line in refusal(source={**STREAM, "load": "copy", "streamMemoryLimit": "2Gi"})


def test_a_copied_source_keeps_its_flags_and_variables():
    # --load-format and the AWS names are the stream's: a copied model may still set them.
    model = one({**STREAM, "load": "copy"}, args=["--load-format", "safetensors"],
                env={"RUNAI_STREAMER_CONCURRENCY": "8"})
    assert model.args == ("--load-format", "safetensors")


def test_an_unknown_load_is_refused():
    assert "models.0.source.load" in refusal(source={**STREAM, "load": "mount"})


def test_every_flag_and_variable_a_streamed_server_gets_is_refused_in_args_and_env():
    """The guard of tests/config/test_config_managed.py, for the stream's own flags and names."""
    from components.compile import compile_stack
    from components.config import managed

    config = load_stack_config({"models": [{"name": "m", "source": STREAM}]})
    (server,) = [m for m in compile_stack(config) if m["kind"] == "Deployment"]
    (container,) = server["spec"]["template"]["spec"]["containers"]
    flags = {name for arg in container["args"] if (name := managed.flag_name(arg))}
    names = {entry["name"] for entry in container["env"]}
    assert {"--load-format"} <= flags and {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "VLLM_ASSETS_CACHE"} <= names
    for flag in flags:
        assert managed.arg_problems([flag, "x"], "vllm", streaming=True), flag
    for name in names:
        assert managed.env_problems({name: "x"}, "vllm", streaming=True), name
