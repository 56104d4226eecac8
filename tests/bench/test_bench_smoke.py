"""Every benchmark's smallest case runs to its end (tests/bench/smallest.py holds one line per
case, with the tier that has what it starts; the crds group's case is in tests/integration/test_bench_wake_smoke.py)."""

from __future__ import annotations

import ast

import pytest

from tests.bench.bench_runner import BENCH, run_case, scripts_with_main
from tests.bench.smallest import SMALLEST, Case
from tests.support.python_source import parse_file
from tests.tiers import TIERS

HERE = tuple(case for case in SMALLEST if case.tier in TIERS)


def test_every_benchmark_script_has_its_smallest_case():
    covered = {case.script for case in SMALLEST}
    missing = sorted(set(scripts_with_main()) - covered)
    assert not missing, f"bench/ scripts without a smallest case: add a line to tests/bench/smallest.py for {missing}"
    gone = sorted(covered - set(scripts_with_main()))
    assert not gone, f"tests/bench/smallest.py names scripts bench/ no longer has: {gone}"


def run_py_names() -> tuple[str, ...]:
    """bench/run.py's NAMES, read from its source (importing it would put bench/ first on sys.path)."""
    tree = parse_file(BENCH / "run.py")
    (names,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(target, "id", "") == "NAMES" for target in node.targets)]
    return tuple(ast.literal_eval(names))


def test_every_benchmark_of_run_py_has_its_smallest_case():
    NAMES = run_py_names()  # noqa: N806 - the constant's name in bench/run.py
    covered = {name for case in SMALLEST if case.script == "run.py"
               for name in case.args[case.args.index("--only") + 1].split(",")}
    assert covered == set(NAMES), f"bench/run.py benchmarks without a smoke case: {sorted(set(NAMES) - covered)}"


def test_every_case_names_a_tier():
    odd = [case for case in SMALLEST if case.tier not in (*TIERS, "crds")]
    assert not odd, f"tests/bench/smallest.py: tier must be one of {TIERS} or crds: {odd}"


@pytest.mark.parametrize("case", [pytest.param(case, marks=getattr(pytest.mark, case.tier),
                                               id=f"{case.script}:{','.join(case.args)}") for case in HERE])
def test_the_smallest_case_runs(case: Case, tmp_path):
    run_case(case, tmp_path)
