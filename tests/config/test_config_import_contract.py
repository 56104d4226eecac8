"""Every module of components/config is under the config layers contract (.importlinter).

import-linter checks only the modules a layers contract names: a new section left out of the list
is checked by nothing, and a cycle through it (a section importing the aggregate or another
section above it) passes `lint-imports`. This test fails on such a module, so it cannot be
forgotten.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

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
    from components.config.model import SOURCE_CLASSES
    from components.config.sources import SOURCE_TYPES

    assert tuple(SOURCE_CLASSES) == SOURCE_TYPES
