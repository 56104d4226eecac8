"""Every test checks something: a test that cannot fail passes whatever the code does.

The rule, read from the source with ``ast`` (nothing is run): a test function (``test*`` at
module level or in a ``Test*`` class, in ``tests/**/test_*.py``) must, in its own body or in a
helper it calls, do at least one of
- an ``assert`` statement;
- ``pytest.raises`` / ``pytest.fail`` / ``pytest.warns`` (as a call or a ``with``);
- call a function named ``assert*``, ``check*``, ``expect*``, ``validate*`` or ``verify*`` (by
  convention those raise or fail on a mismatch; mock objects' ``assert_called_*`` count too).
A helper is a function of the same module, or one imported from a module under tests/ (the kits:
tests/support: harness.py, component_kit.py, fault_kit.py, ...); it counts when it meets the rule itself, to any
depth (methods and fixtures are not followed). A test that only runs code to see it does not
raise is flagged: say what it must produce.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CHECKING_NAMES = ("assert", "check", "expect", "validate", "verify")
PYTEST_CHECKS = {"raises", "fail", "warns"}


def _called_name(call: ast.Call) -> tuple[str, str]:
    """(object, name) of a call: ``pytest.raises`` -> ("pytest", "raises"), ``f()`` -> ("", "f")."""
    func = call.func
    if isinstance(func, ast.Name):
        return "", func.id
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ""
        return owner, func.attr
    return "", ""


class Module:
    """One Python file under tests/: its functions and the helper names it imports from tests/."""

    def __init__(self, path: Path):
        self.path = path
        self.tree = ast.parse(path.read_text(), filename=str(path))
        self.functions: dict[str, ast.AST] = {}
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (module stem, name there)
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (node.module.rsplit(".", 1)[-1], alias.name)

    def tests(self) -> list[tuple[str, ast.AST]]:
        found = [(node.name, node) for node in self.tree.body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")]
        for cls in self.tree.body:
            if isinstance(cls, ast.ClassDef) and cls.name.startswith("Test"):
                found += [(f"{cls.name}.{node.name}", node) for node in cls.body
                          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")]
        return found


class Checker:
    def __init__(self, root: Path):
        self.root = root
        self.modules = {path: Module(path) for path in sorted(root.rglob("*.py"))}
        self.by_stem = {path.stem: module for path, module in self.modules.items()}
        self._memo: dict[tuple[Path, str], bool] = {}

    def _resolve(self, module: Module, name: str) -> tuple[Module, ast.AST] | None:
        if name in module.functions:
            return module, module.functions[name]
        if name in module.imports:
            stem, original = module.imports[name]
            other = self.by_stem.get(stem)
            if other is not None and original in other.functions:
                return other, other.functions[original]
        return None

    def checks(self, module: Module, node: ast.AST) -> bool:
        """Whether ``node`` (a function) checks something, itself or through a helper."""
        key = (module.path, getattr(node, "name", "?") + f":{getattr(node, 'lineno', 0)}")
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # a recursive helper does not prove itself
        helpers = []
        result = False
        for inner in ast.walk(node):
            if isinstance(inner, ast.Assert):
                result = True
                break
            if isinstance(inner, ast.Call):
                owner, name = _called_name(inner)
                if (owner == "pytest" and name in PYTEST_CHECKS) or name.lstrip("_").startswith(CHECKING_NAMES):
                    result = True
                    break
                if not owner:
                    helpers.append(name)
        if not result:
            for name in helpers:
                found = self._resolve(module, name)
                if found is not None and self.checks(*found):
                    result = True
                    break
        self._memo[key] = result
        return result

    def offenders(self) -> list[str]:
        found = []
        for path, module in self.modules.items():
            if not path.name.startswith("test_"):
                continue
            for name, node in module.tests():
                if not self.checks(module, node):
                    found.append(f"{path.relative_to(self.root.parent)}::{name}")
        return found


# Known offenders in files other branches are editing, to be given an assertion after the merge.
# Each one must still offend (a fixed test is taken off this list), and no new one may appear.
PENDING: set[str] = set()


def test_every_test_checks_something():
    offenders = set(Checker(TESTS).offenders())
    new = sorted(offenders - PENDING)
    assert not new, "tests that cannot fail (no assert, no pytest.raises/fail, no check helper):\n" + "\n".join(new)
    fixed = sorted(PENDING - offenders)
    assert not fixed, "these now check something (or are gone): take them off PENDING:\n" + "\n".join(fixed)


# ---- the checker itself ----------------------------------------------------------------------

CASES = {
    "bare": ("def test_x():\n    run()\n", ["test_x"]),
    "assert": ("def test_x():\n    assert run() == 1\n", []),
    "raises": ("import pytest\ndef test_x():\n    with pytest.raises(ValueError):\n        run()\n", []),
    "fail": ("import pytest\ndef test_x():\n    if run():\n        pytest.fail('no')\n", []),
    "named helper": ("def test_x():\n    assert_ready(run())\n", []),
    "mock check": ("def test_x(m):\n    m.assert_called_once_with(1)\n", []),
    "local helper": ("def _check_it():\n    assert run()\ndef test_x():\n    _check_it()\n", []),
    "helper that does not check": ("def helper():\n    run()\ndef test_x():\n    helper()\n", ["test_x"]),
    "recursive helper": ("def helper():\n    helper()\ndef test_x():\n    helper()\n", ["test_x"]),
    "class": ("class TestA:\n    def test_x(self):\n        run()\n", ["TestA.test_x"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_checker_flags_only_tests_that_check_nothing(tmp_path, case):
    source, expected = CASES[case]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sample.py").write_text(source)
    found = [name.split("::", 1)[1] for name in Checker(tmp_path / "tests").offenders()]
    assert found == expected


def test_the_checker_follows_helpers_imported_from_a_kit(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "kit.py").write_text("def wait_ready(x):\n    assert x\ndef deploy(x):\n    return x\n")
    (tmp_path / "tests" / "test_sample.py").write_text(
        "from kit import deploy, wait_ready\ndef test_a():\n    wait_ready(1)\ndef test_b():\n    deploy(1)\n")
    assert [name.split("::", 1)[1] for name in Checker(tmp_path / "tests").offenders()] == ["test_b"]
