"""testkit/ is what the tests and the benchmarks share; neither leans the wrong way:

- testkit imports nothing of tests/ (a test's refactor cannot break a benchmark);
- bench/ imports nothing of tests/ but the modules listed below, each with why it is not in the
  kit yet (a benchmark that imports a test module breaks when the test is refactored, unnoticed:
  bench/run.py --quick failed that way in 2026-12).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# bench/engine_path.py runs the engine tier's serving helpers (tests/engine/conftest.py's pull_for
# and serving, whole_path.py), which another branch was reworking (2026-12-07): to move into
# testkit/ once it has landed.
BENCH_MAY_IMPORT = {
    "tests.engine.conftest": "bench/engine_path.py: the engine tier's pull and serve helpers",
    "tests.engine.engine_kit": "bench/engine_path.py: the vLLM kit's location and CPU env",
    "tests.engine.rendered": "bench/engine_path.py: the rendered server's free port",
    "tests.engine.whole_path": "bench/engine_path.py: the whole path before the real vLLM",
}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
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
