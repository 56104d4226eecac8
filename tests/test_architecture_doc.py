"""docs/architecture.md says what the code is; where a claim can be checked, it is checked here
against the code (a claim that drifts fails, as issue 40 found four false ones):

- the "Tests" section names every folder of tests/ (a new folder left out of it is one a reader
  of the layout never finds);
- every test file the docs and the import contracts cite exists;
- the layers table names the import contracts' root packages, and the paragraph under it the
  app's layers in the contract's order;
- the observers of the status provider, and the module paths pickled providers in deployed
  stacks name (the state-compat baseline's);
- which modules of `components` import Pulumi;
- which modules re-export other modules' names, and that nothing imports a name from a module
  that only imports it;
- which config sections name another section in type hints only (the type circles).
"""

from __future__ import annotations

import ast
import base64
import configparser
import importlib
import json
import pickletools
import re
import typing
from functools import cache
from pathlib import Path

from tests.support.python_source import parse_file

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PRODUCT = ("components", "providers", "contract", "llm_serving", "policies")
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}


def doc() -> str:
    return DOC.read_text()


def paragraph(starting: str) -> str:
    """The doc's paragraph that starts with ``starting`` (up to the next blank line)."""
    text = doc()
    start = text.index(starting)
    end = text.find("\n\n", start)
    return " ".join(text[start:end if end != -1 else len(text)].split())


def ticked(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def contracts() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    return parser


@cache
def modules(folder: str) -> dict[str, ast.Module]:
    """Dotted module name -> its syntax tree, for every module under ``folder``."""
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found[name] = parse_file(path)
    return found


def test_the_tests_section_names_every_folder():
    section = doc().split("\n## Tests\n", 1)[1].split("\n## ", 1)[0]
    folders = sorted(path.name for path in (ROOT / "tests").iterdir()
                     if path.is_dir() and path.name != "__pycache__")
    missing = [name for name in folders if f"`{name}/`" not in section]
    assert not missing, f"docs/architecture.md, Tests: name these folders of tests/: {missing}"


def test_every_test_file_cited_exists():
    cited = set()
    for source in (DOC, ROOT / ".importlinter", ROOT / "components" / "resources" / "__init__.py"):
        cited |= set(re.findall(r"\btests/[\w/]+\.py\b", source.read_text()))
    missing = sorted(path for path in cited if not (ROOT / path).is_file())
    assert not missing, f"cited but not there (docs/architecture.md, .importlinter): {missing}"


def test_the_layers_table_names_the_contracts_root_packages():
    table = doc().split("## The layers\n", 1)[1].strip("\n").split("\n\n", 1)[0]
    rows = {ticked(line.split("|")[1])[0] for line in table.splitlines()[2:] if line.startswith("| `")}
    roots = set(contracts()["importlinter"]["root_packages"].split())
    assert rows == roots, f"the layers table names {sorted(rows)}; .importlinter's root packages are {sorted(roots)}"


def test_the_app_layers_are_described_in_the_contracts_order():
    layers = [name.strip() for line in contracts()["importlinter:contract:app"]["layers"].splitlines()
              for name in line.split("|") if name.strip()]
    described = [name for name in ticked(paragraph("Inside `components` (top to bottom)")) if name in layers]
    assert described[:len(layers)] == layers, f"described {described}; the contract's layers are {layers}"


def test_the_observers_are_the_ones_the_status_provider_has():
    from providers.observe import Observer

    names = [cls.__name__ for cls in typing.get_args(Observer)]
    line = paragraph("observe.py: the")
    assert f"the {NUMBERS[len(names)]} observers" in line, line
    assert set(names) <= set(ticked(line)), f"{line}: name each of {names}"


def pickled_modules(baseline: dict) -> set[str]:
    """The module paths the baseline's pickled providers import (their GLOBAL opcodes)."""
    found = set()
    for resource in baseline["resources"].values():
        blob = (resource.get("inputs") or {}).get("__provider")
        if not isinstance(blob, str):
            continue
        strings = [arg for op, arg, _ in pickletools.genops(base64.b64decode(blob)) if isinstance(arg, str)]
        for op, arg, _ in pickletools.genops(base64.b64decode(blob)):
            if op.name == "GLOBAL":
                found.add(arg.split(" ", 1)[0])
        found |= {s for s in strings if s.startswith("providers.")}
    return found


def test_the_module_paths_deployed_stacks_name_are_listed_and_importable():
    baseline = json.loads((ROOT / "tests" / "providers" / "state_compat_baseline.json").read_text())
    listed = {name for name in ticked(paragraph("Module paths that deployed stacks name")) if name.startswith("providers.")}
    pickled = pickled_modules(baseline)
    assert pickled, "the baseline's pickles name no module: the check would be void"
    assert pickled <= listed, f"deployed stacks' pickles name {sorted(pickled - listed)}: list them in docs/architecture.md"
    for name in listed:
        importlib.import_module(name)


def imports_pulumi(tree: ast.Module) -> bool:
    for node in ast.walk(tree):  # at any depth: a function-local import counts
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "pulumi" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "pulumi":
            return True
    return False


def test_the_modules_of_components_that_import_pulumi_are_the_ones_named():
    importers = {name for name, tree in modules("components").items() if imports_pulumi(tree)}
    named = ticked(paragraph("Pulumi is imported in `components` by"))
    expected = set()
    for item in named:
        if item.endswith("/"):
            expected |= {name for name in modules("components") if name.startswith("components." + item.strip("/") + ".")}
        elif item.endswith(".py") and not item.startswith("tests/"):
            expected.add("components." + item.removesuffix(".py").replace("/", "."))
    assert importers == expected, (f"components modules importing pulumi: {sorted(importers)}; "
                                   f"docs/architecture.md names {sorted(expected)}")


def reexporters() -> set[str]:
    """Modules whose ``__all__`` lists names they import rather than define."""
    found = set()
    for folder in PRODUCT:
        for name, tree in modules(folder).items():
            imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                        for alias in node.names}
            exported = {element.value for node in tree.body if isinstance(node, ast.Assign)
                        and any(getattr(target, "id", "") == "__all__" for target in node.targets)
                        for element in node.value.elts if isinstance(element, ast.Constant)}
            if exported & imported:
                found.add(name)
    return found


def test_the_modules_that_re_export_are_the_ones_named():
    named = {name for name in ticked(paragraph("Names are imported from the module that defines them"))
             if re.fullmatch(r"[a-z][a-z_]*(\.[a-z_]+)*", name)}
    assert reexporters() == named, f"re-exporting modules: {sorted(reexporters())}; docs/architecture.md names {sorted(named)}"


def defined_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def test_no_name_is_imported_from_a_module_that_only_imports_it():
    product = {name: tree for folder in PRODUCT for name, tree in modules(folder).items()}
    packages = {name for name in product if (ROOT / Path(*name.split(".")) / "__init__.py").is_file()}
    defined = {name: defined_names(tree) for name, tree in product.items()}
    offenders = []
    for folder in (*PRODUCT, "tests", "testkit", "bench"):
        for importer, tree in modules(folder).items():
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom) or node.level or node.module not in product:
                    continue
                if node.module in packages:
                    continue  # a package's front door re-exports by design (the test above)
                for alias in node.names:
                    if f"{node.module}.{alias.name}" not in product and alias.name not in defined[node.module]:
                        offenders.append(f"{importer}: {alias.name} from {node.module}")
    assert not offenders, f"import these from the module that defines them: {offenders}"


def test_the_config_has_no_type_circle_as_the_doc_says():
    circles = set()
    for name, tree in modules("components/config").items():
        for node in tree.body:
            if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
                if any(isinstance(inner, ast.ImportFrom) and inner.level for inner in node.body):
                    circles.add(name.rsplit(".", 1)[1])
    claim = paragraph("A section never imports `stack.py`")
    assert "no import cycle, in the code or in the types" in claim, claim
    assert not circles, f"config modules with type-only imports of the config: {sorted(circles)}; docs/architecture.md says none"
    assert contracts()["importlinter"]["exclude_type_checking_imports"] == "False", "the contracts must count type-only imports"
