"""What a model's `args` and `env` may not say: the flags and variables the program sets itself,
and credentials in plain text.

A user's `--port 9000` used to be appended after ours and win (the probes and the Service still
use 8000); a `--tensor-parallel-size` in args bypassed the GPU check. Each managed flag or
variable is refused with the setting to use instead. The tables cover everything
``components/compile`` emits (tests/config/test_config_managed.py compiles a rich stack and checks
it, so a new flag or variable cannot slip past them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .streaming import STREAM_ENV, STREAM_FLAGS
from .values import Problem

SERVER_PORT = 8000

# vLLM flag -> what to do instead. vLLM reads `--flag value` and `--flag=value`, and its parser
# (FlexibleArgumentParser) also takes `_` for `-` in flag names; booleans take `--no-<flag>`.
MANAGED_VLLM_FLAGS = {
    "--model": "the model is the weights volume the puller fills; set source.repo (and source.revision)",
    "--served-model-name": "the model is served under its name; set name",
    "--host": "the server listens on every address so the Service reaches it; remove it",
    "--port": f"the probes and the Service use {SERVER_PORT}; remove it",
    "--tensor-parallel-size": "set tensorParallelSize (and gpus to a multiple of it)",
    "-tp": "set tensorParallelSize (and gpus to a multiple of it)",
    "--enable-lora": "set lora.enabled",
    "--max-loras": "set lora.maxLoras",
    "--max-lora-rank": "set lora.maxLoraRank",
    "--download-dir": "the weights are downloaded by the puller onto the weights volume; remove it",
    "--hf-token": "a token in args is plain text in the manifest; set hfTokenSecret",
}

_LORA_ENV = "set with LoRA; use lora.enabled"
# Server environment the compiler sets, per engine -> what to do instead.
MANAGED_ENV = {
    "vllm": {
        "HF_HUB_OFFLINE": "the server reads the weights from the volume and never the hub; remove it",
        "HOME": "a writable home for the non-root user; remove it",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": _LORA_ENV,
        # Issue 15 item 4's adapter resolver, set with LoRA: refused ahead of the compiler using them.
        "VLLM_PLUGINS": _LORA_ENV,
        "VLLM_LORA_RESOLVER_CACHE_DIR": _LORA_ENV,
    },
    "nim": {
        "NIM_CACHE_PATH": "NIM's writable cache (an emptyDir beside the read-only weights); remove it",
        "NIM_SERVER_PORT": f"the probes and the Service use {SERVER_PORT}; remove it",
        "NIM_HTTP_API_PORT": f"the probes and the Service use {SERVER_PORT}; remove it",
        "NIM_MODEL_NAME": "the weights volume; set source.repo",
        "NIM_SERVED_MODEL_NAME": "the model is served under its name; set name",
        "NGC_API_KEY": "set nim.authSecret (or the stack secret llm-serving:ngcApiKey)",
    },
}
# The weight puller's environment: `env` does not reach the puller, so setting these on the
# server would silently do nothing for the download.
PULLER_ENV = {
    "HF_ENDPOINT": "the puller's endpoint; set hfEndpoint (or platform.hfEndpoint)",
    "HF_HOME": "the puller's hub cache on the weights volume; remove it",
    "HF_HUB_DISABLE_TELEMETRY": "set for the puller; remove it",
    "HF_HUB_ENABLE_HF_TRANSFER": "set for the puller (off; why: docs/weight-sources.md); remove it",
    "HF_HUB_DISABLE_UPDATE_CHECK": "set for the puller; remove it",
    "HF_XET_CHUNK_CACHE_SIZE_BYTES": "set for the puller; remove it",
    "HF_TOKEN": "set hfTokenSecret (or the stack secret llm-serving:hfToken)",
    # Puller and init containers run with a read-only root: their home is the writable /tmp.
    "HOME": "the puller's and init containers' writable home (read-only root filesystem); remove it",
}

# Names that hold a credential: a plain value would sit in the stack file, the state and the pod spec.
_CREDENTIAL = re.compile(r"(^|_)(TOKEN|API_KEY|APIKEY|PASSWORD|PASSWD|SECRET|SECRET_KEY)$")
_CREDENTIAL_FIX = {
    "HF_TOKEN": "hfTokenSecret (or the stack secret llm-serving:hfToken)",
    "HUGGING_FACE_HUB_TOKEN": "hfTokenSecret (or the stack secret llm-serving:hfToken)",
    "NGC_API_KEY": "nim.authSecret (or the stack secret llm-serving:ngcApiKey)",
}


def flag_name(arg: str) -> str | None:
    """The option an argument names, in vLLM's canonical spelling; None for a value."""
    if not arg.startswith("-") or arg == "-" or re.fullmatch(r"-[0-9.]+", arg):
        return None
    name = arg.split("=", 1)[0].strip()
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
        if name.startswith("--no-"):
            name = "--" + name[len("--no-"):]
    return name


def arg_problems(args: Iterable[str], engine: str, streaming: bool = False) -> list[Problem]:
    """A problem (path relative to the model) for every managed flag in ``args`` (with a streamed
    s3 source, also the stream's: ``streaming.STREAM_FLAGS``)."""
    if engine != "vllm":  # NIM images take their settings from env; the compiler passes no flags
        return []
    managed = {**MANAGED_VLLM_FLAGS, **(STREAM_FLAGS if streaming else {})}
    problems = []
    for index, arg in enumerate(args):
        for word in arg.split():  # "--port 9000" written as one item is still --port
            name = flag_name(word)
            if name in managed:
                problems.append(Problem(f"args.{index}", f"{name} is managed by this program: "
                                        f"{managed[name]}"))
                break
    return problems


def is_credential_name(name: str) -> bool:
    return bool(_CREDENTIAL.search(name.upper()))


def env_problems(env: dict[str, str], engine: str, streaming: bool = False) -> list[Problem]:
    """A problem (path relative to the model) for each managed or credential-looking name in ``env``
    (with a streamed s3 source, also the stream's: ``streaming.STREAM_ENV``)."""
    managed = {**PULLER_ENV, **MANAGED_ENV.get(engine, {}), **(STREAM_ENV if streaming else {})}
    problems = []
    for name in sorted(env):
        if is_credential_name(name):
            fix = _CREDENTIAL_FIX.get(name.upper())
            fix = (f"use a secret reference: {fix}" if fix else
                   "use a secret reference instead: env cannot reference a Kubernetes Secret yet "
                   "(hfTokenSecret and nim.authSecret carry HF_TOKEN and NGC_API_KEY)")
            problems.append(Problem(f"env.{name}", "looks like a credential, and env values are plain "
                                    f"text (in the stack file, the state and the pod spec): remove it; {fix}"))
        elif name in managed:
            problems.append(Problem(f"env.{name}", f"is set by this program: {managed[name]}"))
    return problems
