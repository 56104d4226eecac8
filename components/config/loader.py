"""From a Pulumi stack file (or the engine's config) to a validated ``StackConfig``.

Every problem is reported at once, one ``field.path: what to do`` line each, before anything
touches a cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from pydantic import ValidationError

from .model import StackConfig
from .values import Problems

PROJECT = "llm-serving"
# Stack config keys this program reads, as `llm-serving:<key>`; derived from the model so a
# new section is accepted as soon as it exists.
SECTIONS = tuple(field.alias or name for name, field in StackConfig.model_fields.items())

_FRIENDLY = {
    "extra_forbidden": "unknown field; remove it or fix its spelling (see docs/config-reference.md)",
    "missing": "required; add it (see docs/config-reference.md)",
}


class ConfigError(Exception):
    """Invalid stack config: ``problems`` holds one ``field.path: reason`` line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid stack config:\n" + "\n".join(f"  {p}" for p in problems))


def _join(*parts: Any) -> str:
    return ".".join(str(p) for p in parts if p != "")


def format_validation_error(error: ValidationError) -> list[str]:
    lines: list[str] = []
    for item in error.errors():
        where = _join(*item["loc"])
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, Problems):
            lines.extend(f"{_join(where, path)}: {message}" for path, message in cause.problems)
            continue
        message = _FRIENDLY.get(item["type"], item["msg"])
        if message.startswith("Value error, "):
            message = message[len("Value error, "):]
        lines.append(f"{where or '(stack)'}: {message}")
    return lines


def load_stack_config(raw: Mapping[str, Any]) -> StackConfig:
    """Validate the `llm-serving:*` section values (keys without the project prefix)."""
    try:
        return StackConfig.model_validate(dict(raw))
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from None


def stack_file(stack: str, stacks_dir: Path | None = None) -> Path:
    root = stacks_dir or Path(__file__).resolve().parents[2] / "stacks"
    return root / f"Pulumi.{stack}.yaml"


def read_stack_file(path: Path) -> dict[str, Any]:
    """Read a stack file's `llm-serving:*` keys; other projects' keys (e.g. `kubernetes:`) pass.

    Secure values (``{secure: ...}``) stay opaque here: validation needs to know they exist,
    never their plaintext.
    """
    try:
        document = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise ConfigError([f"(stack): no stack file at {path}; create it or pass --config FILE"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"(stack): {path} is not valid YAML: {exc}"]) from None
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise ConfigError([f"(stack): {path} must be a mapping with a 'config:' mapping"])
    raw: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in (document.get("config") or {}).items():
        project, _, name = str(key).partition(":")
        if project != PROJECT:
            continue
        if name not in SECTIONS:
            unknown.append(f"{key}: unknown stack config key; use one of {', '.join(PROJECT + ':' + s for s in SECTIONS)}")
        raw[name] = value
    if unknown:
        raise ConfigError(unknown)
    return raw


def section_values(get_object: Any, names: Iterable[str] = SECTIONS) -> dict[str, Any]:
    """Collect sections through a getter such as ``pulumi.Config(PROJECT).get_object``."""
    raw = {}
    for name in names:
        value = get_object(name)
        if value is not None:
            raw[name] = value
    return raw
