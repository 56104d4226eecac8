"""What a vLLM model's settings must be on the release line it runs (``vllm_release.py``).

Checked at the stack (the line comes from the model or the platform), above both (it imports
them; only ``stack.py`` runs it): the model's own `args`
against the line's real parser (``vllm_args.py``), with the line named and what it accepts; its
`VLLM_*` env against the names the line reads; the LoRA rank against the line's ranks; and the
API servers runtime LoRA updating allows. Paths are relative to the model, except the platform's.
"""

from __future__ import annotations

import difflib
from functools import cache
from typing import Optional

from . import vllm_args
from .engines import engine_of
from .model import ModelConfig
from .platform import PlatformConfig, cpu_image, platform_line
from .values import Problem
from .vllm_release import DEFAULT_RELEASE, RELEASES, ReleaseLine, image_version, resolve

# The path vllm serve gets as its model in both renders' shape (the weights mount); its value is
# irrelevant to what argparse accepts.
MODEL_PATH = "/models"


@cache
def parser_of(line: str):
    return vllm_args.build(RELEASES[line].facts["parser"])


def image_of(model: ModelConfig, platform: PlatformConfig) -> str:
    return model.image or (cpu_image(platform) if model.on_cpu else platform.vllm_image)


def setting_of(model: ModelConfig, platform: PlatformConfig) -> Optional[str]:
    """The model's own setting; else, unless the model's own image names its version, the
    platform's (which describes the platform's image; a CPU model on the platform's CPU image
    runs the platform's line, which that image was checked against)."""
    if model.vllm_release is not None:
        return model.vllm_release
    if model.image is not None and image_version(model.image) is not None:
        return None
    if model.on_cpu and model.image is None:
        return platform_line(platform)
    return platform.vllm_release


def line_of(model: ModelConfig, platform: PlatformConfig) -> ReleaseLine:
    """The line a valid vLLM model runs (validation refused every model whose line is unclear)."""
    line, _ = resolve(setting_of(model, platform), image_of(model, platform))
    return RELEASES[line or DEFAULT_RELEASE]


def release_problem(model: ModelConfig, platform: PlatformConfig) -> Optional[Problem]:
    """The model's own image or setting against each other (the platform's own pair is the
    platform's check)."""
    if model.image is None and model.vllm_release is None:
        return None
    _, problem = resolve(setting_of(model, platform), image_of(model, platform))
    if problem is None:
        return None
    return Problem("vllmRelease" if model.vllm_release else "image", problem)


def _where(args: tuple[str, ...], names: set[str]) -> str:
    """The path of the first of ``args`` that is one of ``names`` (an option, or a value argparse
    quoted); the whole list when none is."""
    for index, arg in enumerate(args):
        spelled = vllm_args.normalise([arg])[0].split("=", 1)[0] if arg.startswith("--") else arg
        if spelled in names or any(n.startswith(spelled) for n in names if spelled.startswith("--")):
            return f"args.{index}"
    return "args"


def refused_names(message: str) -> set[str]:
    """What argparse's refusal names: the option (with its aliases) or the unrecognized words."""
    if message.startswith("unrecognized arguments: "):
        return {word.split("=", 1)[0] for word in message.split(": ", 1)[1].split()}
    if message.startswith("argument "):
        return set(message[len("argument "):].split(":", 1)[0].split("/"))
    return set()


def _accepted(line: ReleaseLine, message: str) -> str:
    """What the line accepts instead, for the refusals argparse words without it."""
    if not message.startswith("unrecognized arguments: "):
        return ""
    first = message.split(": ", 1)[1].split()[0].split("=", 1)[0]
    removed = dict(line.removed)
    if first in removed:
        others = [o.name for o in RELEASES.values() if first in o.options]
        return f"; {first} was {removed[first]}: remove it, or run vLLM {' or '.join(others)} (vllmRelease)"
    elsewhere = [o.name for o in RELEASES.values() if o is not line and first in o.options]
    if elsewhere:
        return f"; {first} is an option of vLLM {' and '.join(elsewhere)}, not {line.name}: remove it, or set vllmRelease"
    close = difflib.get_close_matches(first, sorted(line.options), n=3)
    return (f"; did you mean {' or '.join(close)}?" if close else
            f"; vLLM {line.name} has no such option (see `vllm serve --help=all` of that version)")


def arg_problems(model: ModelConfig, line: ReleaseLine) -> list[Problem]:
    if not model.args:
        return []
    parser = parser_of(line.name)
    message = vllm_args.refusal(parser, MODEL_PATH, model.args)
    if message is None:
        return _api_server_problems(model, line)
    path = _where(model.args, refused_names(message))
    return [Problem(path, f"vLLM {line.name} (`vllm serve`) refuses it: {message}{_accepted(line, message)}")]


def _api_server_problems(model: ModelConfig, line: ReleaseLine) -> list[Problem]:
    """Runtime LoRA updating (the adapter resolver) with more than one API server raises at start
    (vllm/entrypoints/cli/serve.py run_multi_api_server, both lines); the headless workers of a
    multi-node dataParallel group refuse any (0.32) or more than one (0.11)."""
    namespace = parser_of(line.name).parse_args([MODEL_PATH, *vllm_args.normalise(model.args)])
    count = getattr(namespace, "api_server_count", None)
    spec = model.multi_node
    # vllm/entrypoints/cli/serve.py (both lines): `if args.headless or args.api_server_count < 1:
    # run_headless(args)`: engine workers only, no API server, so the probes and the Service never
    # answer. A dataParallel group's workers get --headless from the compiler (compile/multinode.py).
    if getattr(namespace, "headless", False):
        return [Problem(_where(model.args, {"--headless"}), "--headless starts vLLM without its API server (engine "
                        "workers only), so the probes and the Service would never answer; remove it (the workers "
                        "of a multiNode dataParallel group get it from this program)")]
    if count is not None and count < 1:
        return [Problem(_where(model.args, {"--api-server-count", "-asc"}), f"--api-server-count {count} starts "
                        "vLLM without an API server (as --headless), so the probes and the Service would never "
                        "answer; remove it, or set it to 1 or more")]
    if count is not None and spec is not None and spec.mode == "dataParallel":
        return [Problem(_where(model.args, {"--api-server-count", "-asc"}), "--api-server-count would reach the "
                        "group's headless workers too, which vLLM refuses (no API server runs there); remove it "
                        "(the leader starts its API servers itself)")]
    if not model.lora.enabled:
        return []
    data_parallel = getattr(namespace, "data_parallel_size", None) or 1
    if count is None and line.api_servers_follow_dp and model.multi_node is None:
        count = data_parallel
    if count is None or count <= 1:
        return []
    explicit = getattr(namespace, "api_server_count", None) is not None
    why = (f"--api-server-count {count}" if explicit else
           f"--data-parallel-size {data_parallel} starts {data_parallel} API servers on vLLM {line.name} "
           "(--api-server-count defaults to the data-parallel size)")
    return [Problem(_where(model.args, {"--api-server-count", "-asc"} if explicit else
                           {"--data-parallel-size", "-dp"}),
                    f"{why}, and with LoRA on the server runs with runtime LoRA updating (the adapter "
                    f"resolver), which vLLM refuses with more than one API server; add "
                    f"--api-server-count 1, or turn lora.enabled off")]


def env_problems(model: ModelConfig, line: ReleaseLine) -> list[Problem]:
    problems = []
    for name in sorted(n for n in model.env if n.startswith("VLLM_") and n not in line.env):
        had = [o.name for o in RELEASES.values() if o is not line and name in o.env]
        why = (f"vLLM {line.name} no longer reads it (vLLM {' and '.join(had)} did): remove it" if had else
               f"vLLM {line.name} reads no such variable (its vllm/envs.py does not declare it); remove it or fix "
               "the name")
        close = difflib.get_close_matches(name, sorted(line.env), n=1)
        problems.append(Problem(f"env.{name}", why + (f" (did you mean {close[0]}?)" if close and not had else "")))
    return problems


def lora_problems(model: ModelConfig, line: ReleaseLine) -> list[Problem]:
    rank = model.lora.max_lora_rank
    if not model.lora.enabled or rank in line.lora_ranks:
        return []
    others = [o.name for o in RELEASES.values() if rank in o.lora_ranks]
    bigger = [r for r in line.lora_ranks if r >= rank]
    return [Problem("lora.maxLoraRank", f"{rank} is not a rank vLLM {line.name} accepts "
                    f"({', '.join(map(str, line.lora_ranks))}); use {bigger[0]}"
                    + (f", or set vllmRelease: '{others[0]}'" if others else ""))]


def model_problems(model: ModelConfig, platform: PlatformConfig) -> list[Problem]:
    """Everything a vLLM model must be on its line (paths relative to the model)."""
    if not engine_of(model).release_lines:
        return []
    problem = release_problem(model, platform)
    if problem is not None:
        return [problem]
    line = line_of(model, platform)
    return lora_problems(model, line) + arg_problems(model, line) + env_problems(model, line)
