"""What differs per engine lives in the engine's modules, not in switches on its name (issue 40).

An engine is a variant (components/config/engines/<engine>.py: what it accepts and refuses;
components/compile/engines/<engine>.py: what it renders), keyed by the stack file's `engine`. Code
elsewhere asks the model's variant (``engine_of``, ``server_of``); a comparison of the engine's name
outside the variants is a place a new engine would have to be added by hand. This counts them in
the product (components/, contract/, providers/, llm_serving/) with the patterns issue 40 counted
(31 then, 38 when this test came) and fails on any.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components.compile.engines import SERVERS
from components.config.engines import ENGINES

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("components", "contract", "providers", "llm_serving")

# A comparison of the engine's name, and a call of `on_operator(...)` as a function of the engine
# (ModelConfig's and the provider props' `on_operator` are properties: their definitions are not
# switches).
ENGINE_SWITCH = re.compile(r"engine\s*(==|!=)|(?<!def )on_operator\(")

# The variants' own modules: where an engine's name may be read.
ENGINE_VARIANTS = ("components/config/engines/", "components/compile/engines/")


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


def test_the_variants_exist_and_are_the_ones_searched():
    # A renamed variants folder would make every file "outside" it and the count above meaningless
    # the other way round: every switch moved into a folder that no longer excludes anything.
    for folder in ENGINE_VARIANTS:
        assert (ROOT / folder / "__init__.py").is_file(), folder
    assert len(product_files()) > 100, "the product's files were not found"


@pytest.mark.parametrize("line", [
    'if model.engine == "nim":',
    'if engine!="vllm":',
    "return on_operator(model)",
])
def test_the_patterns_catch_a_switch(line: str):
    assert switches(ENGINE_SWITCH, ENGINE_VARIANTS, {"components/compile/x.py": line})


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
