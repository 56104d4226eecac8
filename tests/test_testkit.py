"""testkit/ is what the tests and the benchmarks share; neither leans the wrong way:

- testkit imports nothing of tests/ (a test's refactor cannot break a benchmark);
- bench/ imports nothing of tests/ (a benchmark that imports a test module breaks when the test
  is refactored, unnoticed: bench/run.py --quick failed that way in 2026-12).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.python_source import parse_file

ROOT = Path(__file__).resolve().parents[1]

# Test modules bench/ may import, each with why it is not in the kit yet: none (the engine tier's
# serving helpers bench/engine_path.py runs moved into testkit/ in 2026-12). A new entry needs a reason.
BENCH_MAY_IMPORT: dict[str, str] = {}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def imports_of_tests(folder: str) -> dict[str, set[str]]:
    return {path.relative_to(ROOT).as_posix(): {m for m in imported_modules(path) if m == "tests" or m.startswith("tests.")}
            for path in sorted((ROOT / folder).rglob("*.py"))}


def test_the_testkit_imports_nothing_of_the_tests():
    offenders = {path: sorted(mods) for path, mods in imports_of_tests("testkit").items() if mods}
    assert not offenders, f"testkit/ must not import tests/ (move what it needs into testkit/): {offenders}"


def test_bench_imports_no_test_module_but_the_listed_ones():
    imported = imports_of_tests("bench")
    offenders = {path: sorted(mods - set(BENCH_MAY_IMPORT)) for path, mods in imported.items() if mods - set(BENCH_MAY_IMPORT)}
    assert not offenders, f"bench/ imports test modules; move what it needs into testkit/: {offenders}"
    unused = set(BENCH_MAY_IMPORT) - set().union(*imported.values())
    assert not unused, f"BENCH_MAY_IMPORT lists modules bench/ no longer imports: take them off {sorted(unused)}"
