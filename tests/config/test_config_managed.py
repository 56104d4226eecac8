"""`args` and `env` cannot override what the program manages, nor carry a credential in plain
text (issue 15 item 2); and the managed tables cover everything the compiler emits, so a flag or
variable added to the compiler without a guard fails here."""

from __future__ import annotations

import pytest

from components.compile import compile_stack
from components.config import ConfigError, cpu, load_stack_config, managed
from tests.support.builders import model, nim_model

# Every engine, path and option that adds flags or env: LoRA, TP, a token Secret, NIM raw with an
# auth Secret, NIM operator.
RICH = {
    "models": [
        model("vllm-rich", gpus=2, tensorParallelSize=2, hfTokenSecret={"name": "hf"},
              lora={"enabled": True, "maxLoras": 2, "maxLoraRank": 32},
              hfEndpoint="http://hf-mirror.mirrors.svc:8080"),
        nim_model("nim-raw", nim={"authSecret": "ngc"}, hfTokenSecret={"name": "hf"}),
        nim_model("nim-op", path="operator", nim={"authSecret": "ngc"}),
        model("vllm-cpu", gpus=0),  # vLLM's CPU server: its KV cache and thread settings
    ],
}


def containers(manifest: dict) -> list[dict]:
    spec = manifest.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    found = list(pod.get("containers", [])) + list(pod.get("initContainers", []))
    if manifest["kind"] == "NIMService":  # the operator's CR carries env/args at the top of spec
        found.append(spec)
    return found


def emitted(engine_of: dict[str, str]) -> tuple[set[str], dict[str, set[str]]]:
    """(vLLM server flags, env names per engine) the compiler emits for RICH."""
    flags: set[str] = set()
    env: dict[str, set[str]] = {"vllm": set(), "nim": set()}
    for manifest in compile_stack(load_stack_config(RICH)):
        owner = manifest["metadata"].get("labels", {}).get("app.kubernetes.io/instance")
        engine = engine_of.get(owner)
        for container in containers(manifest):
            if engine is None:
                continue
            env[engine] |= {entry["name"] for entry in container.get("env", [])}
            if container.get("command") == ["vllm", "serve"]:
                flags |= {name for arg in container.get("args", []) if (name := managed.flag_name(arg))}
    return flags, env


ENGINES = {"vllm-rich": "vllm", "nim-raw": "nim", "nim-op": "nim", "vllm-cpu": "vllm"}


def test_the_rich_stack_emits_flags_and_env_to_check():
    flags, env = emitted(ENGINES)
    # The fixture exercises what it claims (a guard for the guard below).
    assert {"--port", "--tensor-parallel-size", "--enable-lora", "--max-lora-rank"} <= flags
    assert {"HF_HUB_OFFLINE", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "HF_TOKEN", "VLLM_CPU_KVCACHE_SPACE"} <= env["vllm"]
    assert {"NIM_SERVED_MODEL_NAME", "NGC_API_KEY"} <= env["nim"]


def test_every_flag_the_compiler_emits_is_managed():
    flags, _ = emitted(ENGINES)
    assert flags - set(managed.MANAGED_VLLM_FLAGS) == set()


@pytest.mark.parametrize("engine", ["vllm", "nim"])
def test_every_env_name_the_compiler_emits_is_refused_in_env(engine):
    _, env = emitted(ENGINES)
    # model.env reaches the server container only; puller names are refused too (setting them
    # on the server would not reach the download).
    refused = {name for name in env[engine]
               if name in managed.MANAGED_ENV[engine] or name in managed.PULLER_ENV
               or managed.is_credential_name(name) or (engine == "vllm" and name in cpu.MANAGED_ENV)}
    assert env[engine] - refused == set()


def refusals(raw_model: dict) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        load_stack_config({"models": [raw_model]})
    return raised.value.problems


@pytest.mark.parametrize("args, fix", [
    (["--port", "9000"], "the probes and the Service use 8000"),
    (["--port=9000"], "the probes and the Service use 8000"),
    (["--port 9000"], "the probes and the Service use 8000"),
    (["--host", "127.0.0.1"], "listens on every address"),
    (["--served-model-name", "x"], "set name"),
    (["--served_model_name=x"], "set name"),
    (["--tensor-parallel-size", "4"], "set tensorParallelSize"),
    (["-tp", "4"], "set tensorParallelSize"),
    (["-tp=4"], "set tensorParallelSize"),
    (["--model", "/other"], "set source.repo"),
    (["--enable-lora"], "set lora.enabled"),
    (["--no-enable-lora"], "set lora.enabled"),
    (["--max-loras", "9"], "set lora.maxLoras"),
    (["--max-lora-rank=64"], "set lora.maxLoraRank"),
    (["--download-dir", "/tmp"], "puller"),
    (["--hf-token", "hf_x"], "hfTokenSecret"),
])
def test_managed_flags_are_refused_with_the_setting_to_use(args, fix):
    (line,) = refusals(model(args=["--max-model-len", "8192", *args]))
    assert line.startswith("models.0.args.2: ") and "is managed by this program" in line and fix in line


def test_other_flags_and_values_pass():
    # Flags vLLM 0.11 has (an unknown one is the line's parser check: tests/config/test_vllm_args.py);
    # "-1" is a value, not a flag.
    config = load_stack_config({"models": [model(args=["--max-model-len", "8192", "--seed", "-1",
                                                       "--enable-prefix-caching"])]})
    assert config.models[0].args[0] == "--max-model-len"


def test_nim_args_are_not_vllm_flags():
    assert load_stack_config({"models": [nim_model(args=["--port", "1"])]}).models[0].args == ("--port", "1")


@pytest.mark.parametrize("engine_model, name, fix", [
    (model, "HF_HUB_OFFLINE", "never the hub"),
    (model, "HOME", "writable home"),
    (model, "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "lora.enabled"),
    (model, "HF_ENDPOINT", "set hfEndpoint"),
    (nim_model, "NIM_SERVER_PORT", "8000"),
    (nim_model, "NIM_SERVED_MODEL_NAME", "set name"),
    (nim_model, "NIM_CACHE_PATH", "writable cache"),
])
def test_managed_env_is_refused_with_the_setting_to_use(engine_model, name, fix):
    (line,) = refusals(engine_model(env={name: "x"}))
    assert line.startswith(f"models.0.env.{name}: is set by this program") and fix in line


@pytest.mark.parametrize("name, fix", [
    ("HF_TOKEN", "hfTokenSecret"), ("NGC_API_KEY", "nim.authSecret"),
    ("HUGGING_FACE_HUB_TOKEN", "hfTokenSecret"), ("OPENAI_API_KEY", "Kubernetes Secret"),
    ("DB_PASSWORD", "Kubernetes Secret"), ("AWS_SECRET", "Kubernetes Secret"), ("wandb_token", "Kubernetes Secret"),
])
def test_credentials_in_env_are_refused_without_echoing_them(name, fix):
    value = "plaintext-credential-0123456789"
    (line,) = refusals(model(env={name: value}))
    assert line.startswith(f"models.0.env.{name}: looks like a credential")
    assert "secret reference" in line and fix in line and value not in line


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "VLLM_LOGGING_LEVEL", "SECRETARY", "MY_KEY_ID"])
def test_ordinary_names_pass(name):
    assert load_stack_config({"models": [model(env={name: "1"})]}).models[0].env == {name: "1"}
