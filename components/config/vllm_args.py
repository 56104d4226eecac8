"""A stack's own vLLM `args` put to the line's argument parser, as `vllm serve` would parse them.

Each line's parser is a committed description taken from the real vLLM (``vllm_lines/<line>.json``,
written by scripts/gen_vllm_line.py in the engine kit): this module rebuilds an argparse parser
with the same option strings, nargs, choices and value types, and parses the model path plus the
user's args with it. argparse then refuses exactly what the real one refuses, in its words
(``invalid int value``, ``invalid choice``, ``unrecognized arguments``, ``expected one
argument``): the engine tier (tests/engine/test_vllm_args_real.py) compares both on a table of
bad args. vLLM's parser also rewrites its input first (``FlexibleArgumentParser.parse_args``):
``_`` for ``-`` in option names, ``--json.key value`` into one JSON argument, ``-O3`` into
``-O.level``; ``normalise`` does the same.

Value types a line uses that are not re-created (``unchecked``) accept any value here: the
server may still refuse such a value at start.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from typing import Any, Optional


class Refused(Exception):
    """argparse's refusal, without its usage line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits; a validator reports
        raise Refused(message)


class _TypeError(argparse.ArgumentTypeError):
    pass


def _named(function, name: str):
    function.__name__ = name
    return function


def _human_readable_int(value: str) -> int:
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        if "." in number:
            raise _TypeError(f"Decimals are not allowed with binary suffixes like {suffix}. "
                             f"Did you mean to use {number}{suffix.lower()} instead?")
        return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    return int(value)


def _human_readable_int_or_auto(value: str) -> int:
    if value.strip().lower() == "auto":
        return -1
    return _human_readable_int(value)


def value_type(spec: Optional[dict]):
    """A callable that accepts and refuses what the line's type does, under the line's name."""
    if spec is None:
        return None
    kind, name = spec["kind"], spec["name"]
    if kind in ("int", "float"):
        return {"int": int, "float": float}[kind]
    if kind == "str":
        return None if name == "None" else str
    if kind == "json":
        return json.loads
    if kind in ("json_object", "str_or_json"):
        def parse(value: str) -> Any:
            if kind == "str_or_json" and not re.match(r"(?s)^\s*{.*}\s*$", value):
                return value
            try:
                return json.loads(value)
            except ValueError as error:
                raise _TypeError(repr(error)) from error
        return _named(parse, name)
    if kind == "human_readable_int":
        return _named(_human_readable_int, name)
    if kind == "human_readable_int_or_auto":
        return _named(_human_readable_int_or_auto, name)
    if kind in ("optional_type", "parse_type"):
        inner = value_type(spec["inner"]) or str
        shown = spec.get("inner_repr", repr(inner))

        def wrapped(value: str) -> Any:
            if kind == "optional_type" and value in ("", "None"):
                return None
            try:
                return inner(value)
            except ValueError as error:
                raise _TypeError(f"Value {value} cannot be converted to {shown}.") from error
        return _named(wrapped, "_" + kind)
    return None  # unchecked: any value


def build(description: dict) -> argparse.ArgumentParser:
    parser = _Parser(prog=description["prog"], add_help=False, allow_abbrev=description["allow_abbrev"])
    for action in description["actions"]:
        strings = action["option_strings"]
        choices = action["choices"]
        if not action["takes_value"]:
            parser.add_argument(*strings, dest=action["dest"], action="store_const", const=True)
            continue
        kwargs: dict[str, Any] = {"dest": action["dest"], "nargs": action["nargs"]}
        convert = value_type(action["type"])
        if convert is not None:
            kwargs["type"] = convert
        if choices is not None:
            kwargs["choices"] = choices
        if action["action"] == "_AppendAction":
            kwargs["action"] = "append"
        if strings:
            parser.add_argument(*strings, **kwargs)
        else:
            parser.add_argument(action["dest"], **{k: v for k, v in kwargs.items() if k != "dest"})
    return parser


def _nested(keys: list[str], value: Any) -> Any:
    for key in reversed(keys):
        value = {key: value}
    return value


def _merge(into: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


def normalise(args: Sequence[str]) -> list[str]:
    """The arguments as vLLM's parser hands them to argparse."""
    named = re.compile(r"(?<=--)[^.]*")
    out: list[str] = []
    for index, arg in enumerate(args):
        if arg.startswith("--"):
            key, sep, value = arg.partition("=")
            out.append(named.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + sep + value)
        elif arg.startswith("-O") and arg != "-O" and arg[2] != ".":
            out.append(f"-O.level={arg[3:] if arg[2] == '=' else arg[2:]}")
        elif arg == "-O" and index + 1 < len(args) and args[index + 1] in {"0", "1", "2", "3"}:
            out.append("-O.level")
        else:
            out.append(arg)
    # `--json-arg.key value` (and `.key+ a,b`) become one JSON value of `--json-arg`.
    dotted: dict[str, dict] = {}
    kept: list[str] = []
    skip = set()
    for index, arg in enumerate(out):
        if index in skip:
            continue
        if arg.startswith("-") and "." in arg.partition("=")[0]:
            if "=" in arg:
                arg, text = arg.split("=", 1)
            elif index + 1 < len(out):
                text = out[index + 1]
                skip.add(index + 1)
            else:
                kept.append(arg)
                continue
            if arg.endswith("+"):
                arg, text = arg[:-1], json.dumps(text.split(","))
            key, *keys = arg.split(".")
            try:
                value = json.loads(text)
            except ValueError:
                value = text
            _merge(dotted.setdefault(key, {}), _nested(keys, value))
            continue
        kept.append(arg)
    for key, value in dotted.items():
        kept += [key, json.dumps(value)]
    return kept


def refusal(parser: argparse.ArgumentParser, model_path: str, args: Sequence[str]) -> Optional[str]:
    """argparse's message for ``vllm serve <model_path> <args>``, or None when it parses."""
    try:
        parser.parse_args([model_path, *normalise(args)])
    except Refused as refused:
        return str(refused)
    return None
