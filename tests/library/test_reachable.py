"""Every stack-file field is reachable from the library (issue 40): walking the config model from
StackConfig and the library's types from ModelServingArgs, each config field is either a field of
the library class generated from its section (llm_serving/sections.py), typed, with the config's
description as its docstring, or one ModelServingArgs holds itself (``OWN_FIELDS``). And the
generated file is the generator's output for today's config model."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import types
import typing
from typing import Any, Union

import pulumi
from pydantic import BaseModel

import llm_serving as llm
from components.config import sources
from components.config.stack import StackConfig
from llm_serving.section import Section
from testkit.harness import REPO
from tests.support.python_source import parse_file

SCRIPT = REPO / "scripts" / "gen_library_types.py"
FIX = "run `python scripts/gen_library_types.py` and commit llm_serving/sections.py"


def config_fields(model: type[BaseModel], path: str = "") -> typing.Iterator[tuple[str, type[BaseModel], str]]:
    """(stack-file path, section, field name) for every field under ``model``."""
    for name, field in model.model_fields.items():
        key = f"{path}{field.alias or name}"
        yield key, model, name
        for child in _models(field.annotation):
            yield from config_fields(child, f"{key}.")


def _models(annotation: Any) -> list[type[BaseModel]]:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def hints(cls: type) -> dict[str, Any]:
    # pulumi.Input names `Output` by a forward reference.
    return typing.get_type_hints(cls, localns={"Output": pulumi.Output, "T": pulumi.output.T})


def library_sections() -> dict[type[BaseModel], type[Section]]:
    """Config section -> the library class for it, found by walking the library's own annotations
    from ModelServingArgs (what a program can reach, not what a module happens to define)."""
    found: dict[type[BaseModel], type[Section]] = {}

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, Section):
            if annotation.config_model in found:
                return
            found[annotation.config_model] = annotation
            for hint in hints(annotation).values():
                visit(hint)
            return
        if typing.get_origin(annotation) in (Union, types.UnionType) or typing.get_args(annotation):
            for arg in typing.get_args(annotation):
                visit(arg)

    for hint in hints(llm.ModelServingArgs).values():
        visit(hint)
    return found


def test_every_stack_file_field_is_reachable_from_the_library():
    sections = library_sections()
    own = llm.ModelServingArgs.OWN_FIELDS
    missing = []
    for path, model, name in config_fields(StackConfig):
        if path in own:
            assert own[path] in {f.name for f in dataclasses.fields(llm.ModelServingArgs)}, path
            continue
        if model.__name__ in ("StackConfig", "ClusterConfig") and isinstance(model.model_fields[name].annotation, type) \
                and issubclass(model.model_fields[name].annotation, BaseModel):
            continue  # a section: its fields are walked
        if path in ("models", "router", "platform", "cluster"):
            continue  # the sections ModelServingArgs takes by these names
        library = sections.get(model)
        names = {f.name for f in dataclasses.fields(library)} if library else set()
        if name not in names and not (name == "type" and library is not None and library.source_type):
            missing.append(f"{path} ({model.__name__}.{name})")
    assert not missing, "stack-file fields the library cannot set:\n" + "\n".join(missing)


def test_the_generated_sections_carry_the_configs_descriptions_and_types():
    assert llm.Model.config_model.__name__ == "ModelConfig"
    tree = parse_file(REPO / "llm_serving" / "sections.py")
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "S3Source")
    body = model.body
    docs = {target.target.id: body[i + 1].value.value for i, target in enumerate(body[:-1])
            if isinstance(target, ast.AnnAssign) and isinstance(target.target, ast.Name)
            and isinstance(body[i + 1], ast.Expr)}
    assert " ".join(docs["load"].split()).startswith(" ".join(sources.S3Source.model_fields["load"].description.split()))
    assert docs["load"].rstrip().endswith("Default: ``'copy'``.")
    assert hints(llm.S3Source)["load"] == typing.Optional[typing.Literal["copy", "stream"]]
    # pulumi.Input[str]: text, an awaitable or an Output (from another resource).
    for hint in (hints(llm.Model)["image"], hints(llm.PylonConfig)["image"], hints(llm.ModelServingArgs)["namespace"],
                 hints(llm.ModelServingArgs)["hf_token"]):
        assert str in typing.get_args(hint) and "pulumi.output.Output" in str(hint), hint
    assert "Output" not in str(hints(llm.Model)["name"])


def test_the_generated_sections_are_current():
    spec = importlib.util.spec_from_file_location("gen_library_types", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render() == (REPO / "llm_serving" / "sections.py").read_text(), FIX
