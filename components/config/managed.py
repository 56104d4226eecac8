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

from .engines import ENGINES
from .engines.vllm import VLLM
from .streaming import STREAM_ENV, STREAM_FLAGS
from .values import Problem

# What each engine's server gets from the program, by engine (its module in engines/ holds its
# tables): flag -> what to do instead (an engine without flags: none are passed, NIM images take
# their settings from env), and variable -> what to do instead.
MANAGED_FLAGS = {name: engine.managed_flags for name, engine in ENGINES.items() if engine.managed_flags is not None}
MANAGED_ENV = {name: engine.managed_env for name, engine in ENGINES.items()}
MANAGED_VLLM_FLAGS = MANAGED_FLAGS[VLLM.name]

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
    flags = MANAGED_FLAGS.get(engine)
    if flags is None:
        return []
    managed = {**flags, **(STREAM_FLAGS if streaming else {})}
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
