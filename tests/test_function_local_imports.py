"""The product's imports of its own code are at the top of each module, but for the exceptions
docs/architecture.md ("Function-local imports") names, each with what it avoids.

A function-local import of project code hides a dependency from a reader and can hide an import
cycle from `lint-imports` (it sees the import, but nothing says why it is not at the top). This
walks every function of llm_serving/, components/, providers/ and contract/ and fails on one that is not in
the list below, or when a listed one has gone (then the doc is out of date too). Imports of the
standard library or third-party packages inside functions (providers/kube.py's Kubernetes client,
the loader's pulumi.runtime) are not project code and not checked here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.python_source import parse_file, parse_text

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("llm_serving", "components", "providers", "contract")
PROJECT = (*PRODUCT, "policies", "tests")

# (module file, imported module): what each avoids is in docs/architecture.md.
DOCUMENTED = {
    # `targets` alone loads the Pulumi SDK (providers.router_targets imports pulumi.dynamic).
    ("components/cli.py", "components.targets_cli"),
    # the hub client (huggingface_hub, httpx) loads only when preflight runs.
    ("components/program.py", "components.preflight"),
}


def _absolute(path: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not node.level:
        return [node.module or ""]
    # A module's package is its folder (for an __init__.py too: the folder is the package).
    package = list(path.relative_to(ROOT).parts[:-1])
    base = package[: len(package) - (node.level - 1)]
    if node.module:
        return [".".join([*base, node.module])]
    return [".".join([*base, alias.name]) for alias in node.names]


def function_local_project_imports(roots=PRODUCT) -> set[tuple[str, str]]:
    found = set()
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            tree = parse_file(path)
            for function in ast.walk(tree):
                if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    continue
                for node in ast.walk(function):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        for name in _absolute(path, node):
                            if name.split(".")[0] in PROJECT:
                                found.add((path.relative_to(ROOT).as_posix(), name))
    return found


def test_function_local_imports_of_project_code_are_exactly_the_documented_ones():
    found = function_local_project_imports()
    assert found - DOCUMENTED == set(), ("function-local imports of project code; move them to the top "
                                         "of the module, or document why not in docs/architecture.md "
                                         "and list them here")
    assert DOCUMENTED - found == set(), "listed but gone: drop them here and in docs/architecture.md"


def test_the_doc_names_each_exception():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## Function-local imports", 1)[1].split("\n## ", 1)[0]
    for path, module in DOCUMENTED:
        assert f"`{path}`" in section and f"`{module.rsplit('.', 1)[1]}`" in section, (path, module)


def test_relative_imports_resolve_to_the_module_they_name(tmp_path):
    tree = parse_text("from .compile.gateway import endpoint_url\nfrom . import values\nfrom ..x import y\n")
    nodes = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
    names = [_absolute(ROOT / "components/config/loader.py", n) for n in nodes]
    assert names == [["components.config.compile.gateway"], ["components.config.values"], ["components.x"]]
