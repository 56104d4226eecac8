"""Every test checks something: a test that cannot fail passes whatever the code does.

The rule, read from the source with ``ast`` (nothing is run): a test function (``test*`` at
module level or in a ``Test*`` class, in ``tests/**/test_*.py``) must, in its own body or in a
helper it calls, do at least one of
- an ``assert`` statement, or a ``raise`` (a helper that raises on a mismatch);
- ``pytest.raises`` / ``pytest.fail`` / ``pytest.warns`` (as a call or a ``with``);
- one of ``unittest.mock``'s own checks on a mock (``m.assert_called_once_with(...)`` and the
  rest of ``MOCK_CHECKS``: the library's documented calls that raise on a mismatch).
A helper counts only when this checker can read it and it meets the rule itself, to any depth:
a function of the test's own module, a method of the test's own class called on ``self``, or a
function imported by name from a module under tests/ or testkit/ (``from testkit.harness import x``,
or called through the imported module: ``harness.x()``), found by its module's dotted path. A
call it cannot see into (a fixture's method, a third-party function, a name from outside tests/)
does not count, whatever it is called: a ``check_ready()`` that is only a name proves nothing.
A test that only runs code to see it does not raise is flagged: say what it must produce.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.python_source import parse_file

TESTS = Path(__file__).resolve().parent
PYTEST_CHECKS = {"raises", "fail", "warns"}
# unittest.mock's checks (Mock, MagicMock, AsyncMock): each raises AssertionError on a mismatch.
MOCK_CHECKS = {
    "assert_called", "assert_called_once", "assert_called_with", "assert_called_once_with",
    "assert_any_call", "assert_has_calls", "assert_not_called", "assert_awaited", "assert_awaited_once",
    "assert_awaited_with", "assert_awaited_once_with", "assert_any_await", "assert_has_awaits",
    "assert_not_awaited",
}


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
    """One Python file under tests/: its functions, its classes' methods and what it imports."""

    def __init__(self, path: Path, root: Path):
        self.path = path
        self.tree = parse_file(path)
        self.functions: dict[str, ast.AST] = {}
        self.methods: dict[ast.AST, dict[str, ast.AST]] = {}  # a test's class's methods, by test
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (dotted module, name there)
        self.modules: dict[str, str] = {}  # local name -> dotted module (``from tests.support import harness``)
        package = ".".join(path.relative_to(root.parent).parts[:-1])
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                methods = {m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
                for method in methods.values():
                    self.methods[method] = methods
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the test's own package
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, *([base] if base else [])])
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (base, alias.name)
                    self.modules[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.modules[alias.asname] = alias.name

    def tests(self) -> list[tuple[str, ast.AST]]:
        found = [(node.name, node) for node in self.tree.body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")]
        for cls in self.tree.body:
            if isinstance(cls, ast.ClassDef) and cls.name.startswith("Test"):
                found += [(f"{cls.name}.{node.name}", node) for node in cls.body
                          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")]
        return found


class Checker:
    def __init__(self, root: Path, *kits: Path):
        self.root = root
        # The kits beside tests/ (testkit/, shared with bench/) are read too: a test's check may
        # be a testkit helper's assert.
        self.modules = {path: Module(path, root) for folder in (root, *kits) for path in sorted(folder.rglob("*.py"))}
        # By dotted path from the folder above tests/ (tests.support.fakes, testkit.harness), and, for a bare
        # ``from kit import x`` of a sibling file, by its folder and stem.
        self.by_name = {".".join(path.relative_to(root.parent).with_suffix("").parts): module
                        for path, module in self.modules.items()}
        self._memo: dict[tuple[Path, str], bool] = {}

    def _module(self, importer: Module, dotted: str) -> Module | None:
        found = self.by_name.get(dotted) or self.by_name.get(dotted.removesuffix(".__init__"))
        if found is None and "." not in dotted:  # a sibling module, on the test's own folder
            found = self.modules.get(importer.path.parent / f"{dotted}.py")
        return found

    def _resolve(self, module: Module, owner: str, name: str, caller: ast.AST) -> tuple[Module, ast.AST] | None:
        if not owner:
            if name in module.functions:
                return module, module.functions[name]
            if name in module.imports:
                dotted, original = module.imports[name]
                other = self._module(module, dotted)
                if other is not None and original in other.functions:
                    return other, other.functions[original]
            return None
        if owner == "self":
            method = module.methods.get(caller, {}).get(name)
            return (module, method) if method is not None else None
        if owner in module.modules:
            other = self._module(module, module.modules[owner])
            if other is not None and name in other.functions:
                return other, other.functions[name]
        return None

    def checks(self, module: Module, node: ast.AST) -> bool:
        """Whether ``node`` (a function) checks something, itself or through a helper it can read."""
        key = (module.path, getattr(node, "name", "?") + f":{getattr(node, 'lineno', 0)}")
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # a recursive helper does not prove itself
        helpers = []
        result = False
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Assert, ast.Raise)):
                result = True
                break
            if isinstance(inner, ast.Call):
                owner, name = _called_name(inner)
                if (owner == "pytest" and name in PYTEST_CHECKS) or (owner and name in MOCK_CHECKS):
                    result = True
                    break
                helpers.append((owner, name))
        if not result:
            for owner, name in helpers:
                found = self._resolve(module, owner, name, node)
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
    offenders = set(Checker(TESTS, TESTS.parent / "testkit").offenders())
    new = sorted(offenders - PENDING)
    assert not new, ("tests that cannot fail (no assert, raise or pytest.raises/fail, itself or in a helper "
                     "this test can read):\n") + "\n".join(new)
    fixed = sorted(PENDING - offenders)
    assert not fixed, "these now check something (or are gone): take them off PENDING:\n" + "\n".join(fixed)


# ---- the checker itself ----------------------------------------------------------------------

CASES = {
    "bare": ("def test_x():\n    run()\n", ["test_x"]),
    "assert": ("def test_x():\n    assert run() == 1\n", []),
    "raises": ("import pytest\ndef test_x():\n    with pytest.raises(ValueError):\n        run()\n", []),
    "fail": ("import pytest\ndef test_x():\n    if run():\n        pytest.fail('no')\n", []),
    "a name it cannot see into": ("def test_x():\n    assert_ready(run())\n", ["test_x"]),
    "a third-party check": ("import lib\ndef test_x():\n    lib.check(run())\n", ["test_x"]),
    "a fixture's method": ("def test_x(cluster):\n    cluster.verify_ready()\n", ["test_x"]),
    "mock check": ("def test_x(m):\n    m.assert_called_once_with(1)\n", []),
    "local helper": ("def _check_it():\n    assert run()\ndef test_x():\n    _check_it()\n", []),
    "helper that raises": ("def want(x):\n    if not x:\n        raise AssertionError(x)\n"
                           "def test_x():\n    want(run())\n", []),
    "named like a check, checks nothing": ("def check_it():\n    run()\ndef test_x():\n    check_it()\n",
                                           ["test_x"]),
    "method on self": ("class TestA:\n    def _want(self, x):\n        assert x\n"
                       "    def test_x(self):\n        self._want(run())\n", []),
    "method on self that checks nothing": ("class TestA:\n    def _go(self):\n        run()\n"
                                           "    def test_x(self):\n        self._go()\n", ["TestA.test_x"]),
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


def test_the_checker_follows_helpers_of_tests_support_by_their_dotted_path(tmp_path):
    support = tmp_path / "tests" / "support"
    support.mkdir(parents=True)
    (support / "kit.py").write_text("def wait_ready(x):\n    assert x\ndef deploy(x):\n    return x\n")
    # a module of the same stem elsewhere must not be taken for it
    (tmp_path / "tests" / "other").mkdir()
    (tmp_path / "tests" / "other" / "kit.py").write_text("def deploy(x):\n    assert x\n")
    (tmp_path / "tests" / "test_sample.py").write_text(
        "from tests.support import kit\nfrom tests.support.kit import deploy, wait_ready\n"
        "def test_a():\n    wait_ready(1)\ndef test_b():\n    deploy(1)\n"
        "def test_c():\n    kit.wait_ready(1)\ndef test_d():\n    kit.deploy(1)\n")
    assert [name.split("::", 1)[1] for name in Checker(tmp_path / "tests").offenders()] == ["test_b", "test_d"]


def test_the_checker_follows_helpers_imported_from_a_kit(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "kit.py").write_text("def wait_ready(x):\n    assert x\ndef deploy(x):\n    return x\n")
    (tmp_path / "tests" / "test_sample.py").write_text(
        "from kit import deploy, wait_ready\ndef test_a():\n    wait_ready(1)\ndef test_b():\n    deploy(1)\n")
    assert [name.split("::", 1)[1] for name in Checker(tmp_path / "tests").offenders()] == ["test_b"]
