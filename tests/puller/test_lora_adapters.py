"""The LoRA adapters' init container proven (issue 15 item 4): its exact command and env — the
real `hf` CLI and the rebase snippet — run against the loopback Hub-compatible server, into a temp
dir standing for the adapter cache. Checked as vLLM 0.11.0's filesystem resolver reads it: one
directory per adapter name, an adapter_config.json of peft_type LORA whose
base_model_name_or_path is the path the server was started with."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from components.compile import common, server
from components.compile.engines.vllm import LORA_ADAPTERS_DIR
from components.config import load_stack_config
from testkit.hf_server import hub_cli

BASE = "acme/tiny"
ADAPTER_FILES = {
    "adapter_config.json": json.dumps({"peft_type": "LORA", "r": 16, "lora_alpha": 32,
                                       "base_model_name_or_path": "acme/tiny-base",
                                       "target_modules": ["q_proj", "v_proj"]}).encode(),
    "adapter_model.safetensors": b"\0" * 4096,
    "README.md": b"# sql adapter\n",
}


def init_container(hub, adapters):
    config = load_stack_config({"models": [{
        "name": "tiny", "source": {"repo": BASE}, "weights": {"size": "1Gi"},
        "lora": {"enabled": True, "adapters": adapters}}]})
    platform = config.platform.model_copy(update={"hf_endpoint": hub.url})
    config = config.model_copy(update={"platform": platform})
    return server.lora_init_container(config.models[0], config)


def run_init(container: dict, cache: Path, scratch: Path) -> subprocess.CompletedProcess:
    """The container's command with its env; the two mounts it writes (the adapter cache and
    /tmp) become temp dirs, nothing else of this process's environment is passed."""
    env = {"PATH": f"{hub_cli().parent}:{os.environ.get('PATH', '/usr/bin:/bin')}", "LANG": "C.UTF-8"}
    for item in container["env"]:
        value = item["value"]
        if value.startswith(LORA_ADAPTERS_DIR):
            value = str(cache) + value[len(LORA_ADAPTERS_DIR):]
        elif value.startswith(common.TMP_MOUNT + "/") or value == common.TMP_MOUNT:
            value = str(scratch) + value[len(common.TMP_MOUNT):]
        env[item["name"]] = value
    return subprocess.run(container["command"], env=env, capture_output=True, text=True, timeout=60)


def test_adapters_land_where_the_resolver_looks_rebased_on_the_weights(hub, tmp_path):
    commit = hub.commit("acme/sql-lora", ADAPTER_FILES)
    hub.commit("acme/chat-lora", ADAPTER_FILES)
    container = init_container(hub, [{"name": "sql", "repo": "acme/sql-lora", "revision": commit},
                                     {"name": "chat", "repo": "acme/chat-lora"}])
    result = run_init(container, tmp_path / "adapters", tmp_path / "tmp")
    assert result.returncode == 0, result.stderr
    for name in ("sql", "chat"):
        directory = tmp_path / "adapters" / name
        assert (directory / "adapter_model.safetensors").read_bytes() == ADAPTER_FILES["adapter_model.safetensors"]
        config = json.loads((directory / "adapter_config.json").read_text())
        # What vLLM's resolver compares: LORA, and the base model exactly as `vllm serve` got it.
        assert config["peft_type"] == "LORA"
        assert config["base_model_name_or_path"] == common.WEIGHTS_MOUNT
        assert config["r"] == 16 and config["target_modules"] == ["q_proj", "v_proj"]


def test_a_repo_without_adapter_config_fails_the_init_container_clearly(hub, tmp_path):
    hub.commit("acme/not-an-adapter", {"model.safetensors": b"\0" * 16})
    container = init_container(hub, [{"name": "x", "repo": "acme/not-an-adapter"}])
    result = run_init(container, tmp_path / "adapters", tmp_path / "tmp")
    assert result.returncode != 0
    assert "has no adapter_config.json" in result.stderr
