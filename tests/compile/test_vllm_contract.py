"""Every option and VLLM_* variable the compiler can give a vLLM server is one vLLM 0.11.0 (the
default image) accepts: data from vLLM's own argument parser and env module, stored with the
version and files read in tests/fixtures/vllm_0_11_0.py. A typo or an option vLLM dropped would
otherwise pass every simulated-cluster test and crash the real server at start."""

from __future__ import annotations

import pytest

from components.compile import compile_stack
from components.config import load_stack_config
from components.config.platform import VLLM_IMAGE
from tests.fixtures import vllm_0_11_0 as vllm
from tests.support.builders import model

# Everything that adds a flag or a variable to a vLLM server: TP, LoRA, a token Secret, user
# args and env that pass validation.
STACK = {"models": [
    model("plain"),
    model("rich", gpus=4, tensorParallelSize=4, lora={"enabled": True, "maxLoras": 2, "maxLoraRank": 64},
          hfTokenSecret={"name": "hf"}, args=["--max-model-len", "8192", "--enable-prefix-caching"],
          env={"VLLM_LOGGING_LEVEL": "DEBUG"}),
    # source.load: stream (the model is an s3:// URI, --load-format runai_streamer, VLLM_ASSETS_CACHE).
    model("streamed", source={"type": "s3", "load": "stream", "bucket": "models", "prefix": "llama/",
                              "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "k"}}),
]}


def canonical(option: str) -> str:
    """How vLLM's parser reads an option name: `_` for `-`, `--no-x` as the boolean `--x`."""
    name = option.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
        if name.startswith("--no-") and name not in vllm.OPTIONS:
            name = "--" + name[len("--no-"):]
    return name


def servers() -> list[dict]:
    found = []
    for manifest in compile_stack(load_stack_config(STACK)):
        for container in manifest.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if container.get("command") == ["vllm", "serve"]:
                found.append(container)
    return found


def test_the_default_image_is_the_version_the_data_describes():
    assert VLLM_IMAGE.endswith(f":v{vllm.VERSION}")


def test_the_stack_renders_vllm_servers_with_options_and_env():
    containers = servers()
    assert len(containers) == 3
    options = {canonical(a) for c in containers for a in c["args"] if a.startswith("-")}
    assert {"--port", "--tensor-parallel-size", "--enable-lora", "--max-lora-rank", "--load-format"} <= options


@pytest.mark.parametrize("index", [0, 1, 2], ids=["plain", "rich", "streamed"])
def test_every_option_is_one_vllm_accepts(index):
    container = servers()[index]
    args = container["args"]
    assert not args[0].startswith("-"), "the model path goes first, as vLLM's positional model_tag"
    unknown = {canonical(a) for a in args[1:] if a.startswith("-")} - vllm.OPTIONS
    assert unknown == set(), f"vLLM {vllm.VERSION} has no option(s) {sorted(unknown)}"


@pytest.mark.parametrize("index", [0, 1, 2], ids=["plain", "rich", "streamed"])
def test_every_vllm_variable_is_one_vllm_reads(index):
    names = {entry["name"] for entry in servers()[index].get("env", []) if entry["name"].startswith("VLLM_")}
    assert names - vllm.ENV == set(), f"vLLM {vllm.VERSION} reads no {sorted(names - vllm.ENV)}"


def test_the_data_is_not_vacuous():
    # The check above is only as good as the sets: they hold what vLLM has, and not what it lacks.
    assert {"--served-model-name", "--host", "--port", "--max-loras", "-tp"} <= vllm.OPTIONS
    assert {"VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_PLUGINS", "VLLM_LORA_RESOLVER_CACHE_DIR"} <= vllm.ENV
    assert "--max-lora-ranks" not in vllm.OPTIONS and "VLLM_ALLOW_RUNTIME_LORA_UPDATE" not in vllm.ENV
    assert canonical("--served_model_name=x") == "--served-model-name"
    assert canonical("--no-enable-lora") == "--enable-lora"
