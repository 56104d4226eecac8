"""From a Pulumi stack file (or the engine's config) to a validated ``StackConfig``.

Every problem is reported at once, one ``field.path: what to do`` line each, before anything
touches a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from . import stack_secrets
from .messages import closest, format_validation_error
from .stack import StackConfig
from .stack_secrets import SECRET_SECTIONS

PROJECT = "llm-serving"
# Stack config keys this program reads, as `llm-serving:<key>`; derived from the model so a
# new section is accepted as soon as it exists.
SECTIONS = tuple(field.alias or name for name, field in StackConfig.model_fields.items())

class ConfigError(Exception):
    """Invalid stack config: ``problems`` holds one ``field.path: reason`` line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid stack config:\n" + "\n".join(f"  {p}" for p in problems))


def load_stack_config(raw: Mapping[str, Any]) -> StackConfig:
    """Validate the `llm-serving:*` section values (keys without the project prefix)."""
    try:
        raw = dict(raw)
        context = {stack_secrets.CONTEXT_KEY: stack_secrets.present_in(raw)}
        stack = StackConfig.model_validate(raw, context=context)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from None
    return stack.with_secret_defaults()


def stack_file(stack: str, stacks_dir: Path | None = None) -> Path:
    root = stacks_dir or Path(__file__).resolve().parents[2] / "stacks"
    return root / f"Pulumi.{stack}.yaml"


def unknown_sections(names: Iterable[str]) -> list[str]:
    """One problem per `llm-serving:<name>` key the program does not read: a typo must not
    silently drop a section. Shared by the stack-file reader and the program's engine reader."""
    problems = []
    for name in sorted(set(names) - set(SECTIONS)):
        match = closest(name, SECTIONS)
        fix = (f"did you mean `{PROJECT}:{match}`?" if match else
               "use one of " + ", ".join(f"{PROJECT}:{section}" for section in SECTIONS))
        problems.append(f"{PROJECT}:{name}: unknown stack config key; {fix}")
    return problems


def read_stack_file(path: Path) -> dict[str, Any]:
    """Read a stack file's `llm-serving:*` keys; other projects' keys (e.g. `kubernetes:`) pass.

    Secure values (``{secure: ...}``) stay opaque here: validation needs to know they exist,
    never their plaintext.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError([f"(stack): {path} is a directory; pass the stack file itself, e.g. "
                           f"{path / 'Pulumi.<stack>.yaml'}"])
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError([f"(stack): no stack file at {path}; create it or pass --config FILE"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"(stack): cannot read {path} ({exc.__class__.__name__}: "
                           f"{getattr(exc, 'strerror', None) or exc}); check the path and its permissions"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"(stack): {path} is not valid YAML: {exc}"]) from None
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise ConfigError([f"(stack): {path} must be a mapping with a 'config:' mapping"])
    raw: dict[str, Any] = {}
    for key, value in (document.get("config") or {}).items():
        project, _, name = str(key).partition(":")
        if project == PROJECT:
            raw[name] = value
    unknown = unknown_sections(raw)
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


def _json_or_text(value: str) -> Any:
    """A section as `validate` reads it from the stack file: JSON (objects, lists, numbers), or
    the raw string when it is not JSON, so a wrong type is reported at its field."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def engine_sections(get: Callable[[str], Any], is_secret: Callable[[str], bool]) -> dict[str, Any]:
    """The `llm-serving:*` sections as the Pulumi engine holds them (``get``/``is_secret``: its
    accessors). A stack secret becomes a stand-in that says whether it is encrypted: presence and
    secrecy only, the plaintext never enters the config model."""
    raw: dict[str, Any] = {}
    for name in SECTIONS:
        value = get(f"{PROJECT}:{name}")
        if value is None:
            continue
        if name in SECRET_SECTIONS:
            raw[name] = {"secure": "(held by the Pulumi engine)"} if is_secret(f"{PROJECT}:{name}") else "(plain text)"
        else:
            raw[name] = _json_or_text(value) if isinstance(value, str) else value
    return raw


def load_program_config() -> StackConfig:
    """The program's one way to read its stack: every `llm-serving:*` key the Pulumi engine
    passed, validated in full; unknown keys and invalid values are reported together."""
    from pulumi.runtime import config as runtime  # only the Pulumi program needs the engine

    # The SDK has no public "all keys" call: keys come from the config map (set by the engine,
    # or by tests' mocks) and from PULUMI_CONFIG, which is how the language host passes them.
    keys = {*runtime.CONFIG.get(), *runtime.get_config_env()}
    problems = unknown_sections(key.partition(":")[2].removeprefix("config:") for key in keys
                                if key.partition(":")[0] == PROJECT)
    try:
        stack = load_stack_config(engine_sections(runtime.get_config, runtime.is_config_secret))
    except ConfigError as invalid:
        problems += invalid.problems
    if problems:
        raise ConfigError(problems)
    return stack
