"""Generate llm_serving/sections.py, the library's typed arguments, from the config model
(components.config.stack.StackConfig): one frozen dataclass per config section, the same fields in
Python spelling, typed to the leaves, each with the config's description as its docstring.

    python scripts/gen_library_types.py           # rewrite llm_serving/sections.py
    python scripts/gen_library_types.py --check   # exit 1 if the committed file is stale (CI)

Why generated source rather than classes made at import: a team's type checker and editor read
the file (completion, docstrings, `py.typed`), which classes built at runtime would hide. Why not
the pydantic models themselves: they validate a section alone, at construction, without the
stack's context (another section, the argument's path in the set) and take no `pulumi.Input`; the
library hands the whole set to the config model once, so every refusal is the stack file's,
at its argument's path (llm_serving/section.py). Defaults are the config's: a field left `None`
is not given, and the config model fills it (its default is in the docstring).
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

# Run by path: the repo's packages come from its root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import AfterValidator, BaseModel, BeforeValidator

from components.config import types as config_types
from components.config import values
from components.config.stack import StackConfig
from scripts import generated_file

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "llm_serving" / "sections.py"

# The library's name for a config section, where it is not the config's (the names the library
# had before these were generated, and short ones for the three a program builds most).
NAMES = {"ModelConfig": "Model", "RouterConfig": "Router", "PlatformConfig": "Platform",
         "ModelSource": "HubSource", "PvcSource": "VolumeSource"}
# Sections ModelServingArgs holds field by field (its own arguments, not a class of their own).
FLATTENED = {"StackConfig", "ClusterConfig"}
# Fields of a section that ModelServingArgs takes instead (llm_serving/args.py, OWN_FIELDS).
OWNED = {"PlatformConfig": ("namespace", "create_namespace")}
# Fields taken by position as well as by keyword, in this order (the library's earlier classes
# took these positionally; every other field is keyword-only).
POSITIONAL = {"HubSource": ("repo", "revision", "allow_patterns"), "S3Source": ("bucket", "prefix", "endpoint", "region"),
              "VolumeSource": ("claim_name", "sub_path"), "Resources": ("cpu", "memory", "kv_cache"),
              "Model": ("name", "source")}
# Names of Secrets the program may create itself (``secret.metadata.name``): pulumi.Input, so the
# objects that read one wait on it. (Images are found by their check; the namespace and the stack
# secrets are ModelServingArgs'.)
SECRET_NAMES = {("SecretKeyRef", "name"), ("S3Credentials", "secret"), ("NimSettings", "auth_secret"),
                ("NimSettings", "pull_secret"), ("WorkerAuth", "secret_name"), ("ApiKeys", "secret_name"),
                ("RouterTls", "existing_secret"), ("GatewayTls", "existing_secret")}
# A weight source's `type` is the class, not a field: the library writes the tag.
TAGGED = "type"


def library_name(model: type[BaseModel]) -> str:
    return NAMES.get(model.__name__, model.__name__)


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    metadata: list[Any] = []
    while typing.get_origin(annotation) is typing.Annotated:
        metadata.extend(annotation.__metadata__)
        annotation = typing.get_args(annotation)[0]
    return annotation, metadata


def is_image(metadata: list[Any]) -> bool:
    return any(isinstance(m, AfterValidator) and m.func is values.check_image for m in metadata)


def models_in(annotation: Any) -> list[type[BaseModel]]:
    annotation, _ = _strip(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in models_in(arg)]


def python_type(annotation: Any, metadata: list[Any] = ()) -> str:
    """The library's annotation for a config annotation (without the Optional every unset field gets)."""
    annotation, more = _strip(annotation)
    metadata = [*metadata, *more]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        inner = [python_type(a) for a in args if a is not type(None)]
        return inner[0] if len(inner) == 1 else f"Union[{', '.join(inner)}]"
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is tuple:
        return f"Sequence[{python_type(args[0])}]"
    if origin is dict:
        return f"Mapping[{python_type(args[0])}, {python_type(args[1])}]"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return library_name(annotation)
    if annotation is str:
        if is_image(metadata):
            return "Input[str]"  # may come from another resource (an image build's output)
        if any(isinstance(m, BeforeValidator) and m.func is config_types._quantity_text for m in metadata):
            return "Union[str, int, float]"  # a quantity: `4`, `0.5` or `'16Gi'`
        return "str"
    return {int: "int", float: "float", bool: "bool"}.get(annotation, getattr(annotation, "__name__", repr(annotation)))


def sequence_of_text(annotation: Any) -> bool:
    annotation, _ = _strip(annotation)
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return any(sequence_of_text(a) for a in typing.get_args(annotation) if a is not type(None))
    return typing.get_origin(annotation) is tuple and _strip(typing.get_args(annotation)[0])[0] is str


def describe_default(field: Any) -> str:
    if field.is_required():
        return "Required."
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is None:
        return "Default: unset."
    if isinstance(value, BaseModel):
        return "Default: its fields' defaults."
    if isinstance(value, (tuple, list)):
        value = [v.model_dump(by_alias=True, exclude_none=True) if isinstance(v, BaseModel) else v for v in value]
    return f"Default: ``{value!r}``."


def order(root: type[BaseModel]) -> list[tuple[type[BaseModel], str]]:
    """Every section under ``root``, leaves first (a class is defined after those it names), each
    with the first stack-file path it is found at."""
    found: dict[type[BaseModel], str] = {}
    result: list[tuple[type[BaseModel], str]] = []

    def visit(model: type[BaseModel], path: str) -> None:
        if model in found:
            return
        found[model] = path
        for name, field in model.model_fields.items():
            key = field.alias or name
            listed = sequence_of_models(field.annotation)
            for child in models_in(field.annotation):
                visit(child, f"{path}.{key}[]" if listed else f"{path}.{key}")
        result.append((model, path))

    visit(root, "llm-serving:")
    return [(m, p) for m, p in result if m.__name__ not in FLATTENED]


def sequence_of_models(annotation: Any) -> bool:
    annotation, _ = _strip(annotation)
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return any(sequence_of_models(a) for a in typing.get_args(annotation) if a is not type(None))
    return typing.get_origin(annotation) is tuple and bool(models_in(typing.get_args(annotation)[0]))


def _docstring(text: str, indent: str) -> list[str]:
    text = " ".join(text.split()).replace("\\", "\\\\").replace('"""', "'''")
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(indent) + len(line) + len(word) + 1 > 110:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}', *(f"{indent}{ln}" for ln in lines[1:]), f'{indent}"""']


def _path(path: str) -> str:
    return path.replace("llm-serving:.", "llm-serving:", 1)


def render_class(model: type[BaseModel], path: str) -> list[str]:
    name = library_name(model)
    own = model.__dict__.get("__doc__")
    doc = (" ".join(own.split()) + " ") if own else ""
    doc += f"Stack file: ``{_path(path)}`` (``{model.__module__}.{model.__qualname__}``)."
    lines = ["", "", "@dataclass(frozen=True)", f"class {name}(Section):", *_docstring(doc, "    "), ""]
    lines.append(f"    config_model: ClassVar[type[BaseModel]] = {model.__module__.rsplit('.', 1)[1]}.{model.__qualname__}")
    tag = model.model_fields.get(TAGGED)
    tagged = tag is not None and typing.get_origin(_strip(tag.annotation)[0]) is Literal
    if tagged:
        lines.append(f"    source_type: ClassVar[Optional[str]] = {typing.get_args(_strip(tag.annotation)[0])[0]!r}")
    positional = POSITIONAL.get(name, ())
    fields = [(n, f) for n, f in model.model_fields.items()
              if not (n == TAGGED and tagged)
              and n not in OWNED.get(model.__name__, ())]
    fields = [*(pair for p in positional for pair in fields if pair[0] == p),
              *(pair for pair in fields if pair[0] not in positional)]
    inputs = {n: "image" if "Input[" in python_type(f.annotation, f.metadata) else "name" for n, f in fields
              if "Input[" in python_type(f.annotation, f.metadata) or (model.__name__, n) in SECRET_NAMES}
    texts = [n for n, f in fields if sequence_of_text(f.annotation)]
    nested = {n: models_in(f.annotation) for n, f in fields if models_in(f.annotation)}
    if inputs:
        line = f"    input_fields: ClassVar[dict[str, str]] = {inputs!r}"
        lines.extend([line] if len(line) <= 140 else [
            "    input_fields: ClassVar[dict[str, str]] = {", *(f"        {k!r}: {v!r}," for k, v in inputs.items()), "    }"])
    if texts:
        lines.append(f"    text_lists: ClassVar[frozenset[str]] = frozenset({tuple(texts)!r})")
    lines.append("")
    keyword_only = False
    for field_name, field in fields:
        if field_name not in positional and not keyword_only:
            lines.append("    _: KW_ONLY")
            keyword_only = True
        kind = python_type(field.annotation, field.metadata)
        if (model.__name__, field_name) in SECRET_NAMES:
            kind = "Input[str]"  # a Secret the program may create (its metadata.name)
        annotation = kind if field.is_required() else f"Optional[{kind}]"
        line = f"    {field_name}: {annotation}" + ("" if field.is_required() else " = None")
        lines.append(line + ("  # noqa: E501 (a long choice, generated)" if len(line) > 140 else ""))
        lines.extend(_docstring(f"{field.description or ''} {describe_default(field)}".strip(), "    "))
    if nested:
        lines.append("")
        lines.append("    @classmethod")
        lines.append("    def section_types(cls) -> dict[str, tuple[type[Section], ...]]:")
        lines.append("        return {")
        lines.extend(f"            {n!r}: ({', '.join(library_name(m) for m in ms)},)," for n, ms in nested.items())
        lines.append("        }")
    return lines


HEADER = '''"""The library's typed arguments, one class per section of the stack config (docs/config-reference.md).

Generated by scripts/gen_library_types.py from components.config.stack.StackConfig: do not edit;
change the config model and run `python scripts/gen_library_types.py` (the test command checks
this file is current). A field left ``None`` is not given: the config model's default applies
(each field's docstring says it), and every value is validated by the config model when the set is
(``llm_serving.stack_config_of``), with the stack files' messages at the argument's path.
"""

# No postponed annotations: the classes are defined leaves first, and tools that read the
# annotations at runtime (a Pulumi component provider's schema inference) get types, not strings.
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import ClassVar, Literal, Optional, Union

from pulumi import Input
from pydantic import BaseModel

from components.config import (
{modules}
)

from .section import Section

__all__ = [
{names}
]'''


def render() -> str:
    sections = order(StackConfig)
    modules = sorted({m.__module__.rsplit(".", 1)[1] for m, _ in sections})
    names = sorted(library_name(m) for m, _ in sections)
    lines = [HEADER.format(modules="\n".join(f"    {m}," for m in modules), names="\n".join(f'    "{n}",' for n in names))]
    for model, path in sections:
        lines.extend(render_class(model, path))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return generated_file.main(argv, description=__doc__.split("\n")[0], render=render, output=OUTPUT, root=ROOT,
                               script="gen_library_types.py")


if __name__ == "__main__":
    sys.exit(main())
