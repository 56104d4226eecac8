"""What differs per engine lives in the engine's modules, not in switches on its name (issue 40).

An engine is a variant (components/config/engines/<engine>.py: what it accepts and refuses;
components/compile/engines/<engine>.py: what it renders), keyed by the stack file's `engine`. Code
elsewhere asks the model's variant (``engine_of``, ``server_of``); a comparison of the engine's name
outside the variants is a place a new engine would have to be added by hand. This counts them in
the product (components/, contract/, providers/, llm_serving/) with the patterns issue 40 counted
(31 then, 38 when this test came) and fails on any.

A weight source is a variant too (components/config/sources.py: one class per `source.type`, each
answering what every kind answers its own way: `streams`, `existing_claim`, `puller_service_account`,
`operator_cacheable`, `volume_sub_path`, `egress_endpoint`), with what differs per kind outside the config in one table
per concern, keyed by `source.type` (components/compile/weights.py `PULLERS`: what fills each kind's
volume; llm_serving/serving.py `_UNPINNED`: what preflight would have pinned; preflight/stack.py:
what it asks). Tests of a source's kind elsewhere (20 when this test came) fail the same way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components.compile.engines import SERVERS
from components.compile.weights import PULLERS
from components.config.engines import ENGINES
from components.config.platform import PlatformConfig
from components.config.sources import SOURCE_CLASSES
from llm_serving.serving import _UNPINNED

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("components", "contract", "providers", "llm_serving")

# A comparison of the engine's name, and a call of `on_operator(...)` as a function of the engine
# (ModelConfig's and the provider props' `on_operator` are properties: their definitions are not
# switches).
ENGINE_SWITCH = re.compile(r"engine\s*(==|!=)|(?<!def )on_operator\(")

# The variants' own modules: where an engine's name may be read.
ENGINE_VARIANTS = ("components/config/engines/", "components/compile/engines/")

# A test of a source's kind: by its class, or by its `type` tag (issue 40's patterns, and a comparison
# of the tag itself, which they miss).
SOURCE_SWITCH = re.compile(r"isinstance\([^)]*(S3|Pvc|Hub|Model)[A-Za-z]*Source|source_type\(|\.type\s*(==|!=)\s*[\"'](hf|s3|pvc)[\"']")
SOURCE_VARIANTS = ("components/config/sources.py",)


def product_files() -> list[Path]:
    return sorted(path for folder in PRODUCT for path in (ROOT / folder).rglob("*.py"))


def switches(pattern: re.Pattern[str], variants: tuple[str, ...], texts: dict[str, str]) -> list[str]:
    """``path:line: text`` of every match of ``pattern`` outside the ``variants`` folders."""
    found = []
    for name, text in texts.items():
        if name.startswith(variants):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    return found


def product_texts() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in product_files()}


def test_no_engine_switch_outside_the_engine_variants():
    found = switches(ENGINE_SWITCH, ENGINE_VARIANTS, product_texts())
    assert not found, ("the engine's name is compared outside its variants; ask the model's variant instead "
                       "(components/config/engines engine_of, components/compile/engines server_of):\n"
                       + "\n".join(found))


def test_no_source_switch_outside_the_source_variants():
    found = switches(SOURCE_SWITCH, SOURCE_VARIANTS, product_texts())
    assert not found, ("the source's kind is tested outside its variants; ask the source (a property of each class "
                       "in components/config/sources.py), or key a table by source.type (weights.PULLERS):\n"
                       + "\n".join(found))


def test_every_source_type_has_its_puller_and_its_unpinned_warning():
    assert list(PULLERS) == list(SOURCE_CLASSES)
    assert list(_UNPINNED) == list(SOURCE_CLASSES)


def test_the_variants_exist_and_are_the_ones_searched():
    # A renamed variants folder would make every file "outside" it and the count above meaningless
    # the other way round: every switch moved into a folder that no longer excludes anything.
    for folder in ENGINE_VARIANTS:
        assert (ROOT / folder / "__init__.py").is_file(), folder
    assert all((ROOT / module).is_file() for module in SOURCE_VARIANTS)
    assert len(product_files()) > 100, "the product's files were not found"


@pytest.mark.parametrize("line", [
    'if model.engine == "nim":',
    'if engine!="vllm":',
    "return on_operator(model)",
])
def test_the_patterns_catch_a_switch(line: str):
    assert switches(ENGINE_SWITCH, ENGINE_VARIANTS, {"components/compile/x.py": line})


@pytest.mark.parametrize("line", [
    "if isinstance(model.source, PvcSource):",
    "if isinstance(source, (S3Source, ModelSource)):",
    'if source_type(model.source) == "hf":',
    'elif source.type == "s3":',
])
def test_the_source_pattern_catches_a_switch(line: str):
    assert switches(SOURCE_SWITCH, SOURCE_VARIANTS, {"components/compile/x.py": line})


@pytest.mark.parametrize("line", [
    "    def on_operator(self) -> bool:",
    "if model.on_operator:",
    "return ENGINES[model.engine]",
])
def test_the_patterns_leave_what_is_no_switch(line: str):
    assert not switches(ENGINE_SWITCH, ENGINE_VARIANTS, {"components/compile/x.py": line})


def test_the_config_and_compile_variants_name_the_same_engines():
    assert list(SERVERS) == list(ENGINES)
    assert all(server.engine is ENGINES[name] for name, server in SERVERS.items())


# What shared code asks every source (a property or method of each class, defined by the class itself:
# a kind that inherited another's answer would answer for the wrong kind).
SOURCE_ANSWERS = ("streams", "existing_claim", "puller_service_account", "operator_cacheable", "volume_sub_path",
                  "egress_endpoint")


def test_every_source_type_answers_what_shared_code_asks():
    missing = {kind: [name for name in SOURCE_ANSWERS if name not in vars(cls)] for kind, cls in SOURCE_CLASSES.items()}
    assert not any(missing.values()), f"source classes that do not answer: {missing}"


def test_each_engine_s_identity_is_the_platform_default_of_the_fields_it_names():
    # The compilers read an engine's uid/gid from the platform fields it names (compile/common.py
    # identity); the config refuses another uid/gid than the engine's image user (model.py
    # identity_problems): both must be one pair.
    for engine in ENGINES.values():
        defaults = tuple(PlatformConfig.model_fields[key].default for key in engine.identity_keys)
        assert defaults == engine.identity, engine.name
