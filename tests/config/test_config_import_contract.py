"""Every module of components/config is under the config layers contract (.importlinter).

import-linter checks only the modules a layers contract names: a new section left out of the list
is checked by nothing, and a cycle through it (a section importing the aggregate or another
section above it) passes `lint-imports`. This test fails on such a module, so it cannot be
forgotten.
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

from tests.support.python_source import parse_file

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "components" / "config"


def contract_layers() -> set[str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    section = parser["importlinter:contract:config"]
    assert section["containers"].strip() == "components.config"
    return {name.strip() for line in section["layers"].splitlines() for name in re.split(r"[|:]", line)
            if name.strip()}


def config_modules() -> set[str]:
    modules = {path.stem for path in CONFIG.glob("*.py") if path.stem != "__init__"}
    packages = {path.parent.name for path in CONFIG.glob("*/__init__.py")}
    return modules | packages


def test_every_config_module_is_a_layer_of_the_config_contract():
    missing = config_modules() - contract_layers()
    assert not missing, (f"components/config modules not in .importlinter's config contract: {sorted(missing)}; "
                         "add each to the layer its imports put it in")


def test_the_contract_names_no_module_that_is_gone():
    # A layer whose module was renamed or removed would keep the list looking complete.
    gone = contract_layers() - config_modules()
    assert not gone, f".importlinter's config contract names modules that do not exist: {sorted(gone)}"


def test_each_source_type_has_its_model():
    from components.config.sources import SOURCE_CLASSES, SOURCE_TYPES

    assert tuple(SOURCE_CLASSES) == SOURCE_TYPES


# Sections that still take the whole model (a `ModelConfig` named under `if TYPE_CHECKING:`, which
# the layers contract does not count), each with what it reads: none since issue 40. The sections
# are types that validate their own keys: what reads several of a model's settings is checked in
# model.py, what reads several sections in stack.py. A new entry needs its reason.
MODEL_TYPE_CIRCLES: dict[str, str] = {}


def relative_imports(tree: ast.Module) -> set[str]:
    """Every config module a module imports, wherever (a TYPE_CHECKING block, a function)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 1:
                found |= {module.split(".")[0]} if module else {alias.name for alias in node.names}
            elif module.startswith("components.config."):
                found.add(module.split(".")[2])
            elif module == "components.config":
                found |= {alias.name for alias in node.names}
    return found


def above(layer: str) -> set[str]:
    """The config modules the contract puts above ``layer`` (the ones that may import it)."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    layers = [{name.strip() for name in re.split(r"[|:]", line) if name.strip()}
              for line in parser["importlinter:contract:config"]["layers"].splitlines() if line.strip()]
    index = next(i for i, names in enumerate(layers) if layer in names)
    return set().union(*layers[:index])


def test_no_section_imports_the_model_module():
    """A section that imports model.py, even for a type hint only, is a circle: model.py imports
    the section. It was how a section checked the whole model (autoscaling, multinode, revisions,
    sources, effect, rules did); such checks belong in model.py."""
    circles = {path.stem for path in CONFIG.glob("*.py")
               if path.stem not in above("model") | {"model", "__init__"}
               and "model" in relative_imports(parse_file(path))}
    assert circles == set(MODEL_TYPE_CIRCLES), (
        f"config sections that import model.py: {sorted(circles)}; listed as remaining: {sorted(MODEL_TYPE_CIRCLES)}. "
        "Move a check that reads the whole model into model.py (and drop a section from the list once it is pure)")
