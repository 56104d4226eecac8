"""Run one benchmark's smallest case (tests/bench/smallest.py) and check that it completed."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.bench.smallest import Case
from tests.support.python_source import parse_file

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def scripts_with_main() -> list[str]:
    """The scripts of bench/ a person runs (an `if __name__ == "__main__":` block)."""
    found = []
    for path in sorted(BENCH.glob("*.py")):
        for node in parse_file(path).body:
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                    and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
                found.append(path.name)
    return found


def first_error(output: str, lines: int = 40) -> str:
    """The first error block of a failed run's output: a server's root cause (vLLM's engine core
    logs it long before the API server's own traceback, which is all a tail of the output shows)."""
    text = output.splitlines()
    start = next((i for i, line in enumerate(text) if " ERROR " in line or line.lstrip().startswith("Traceback")),
                 None)
    return "" if start is None else "\n".join(text[start:start + lines])


def run_case(case: Case, tmp: Path) -> dict:
    """Run the case's command line; the JSON it wrote ({} for a script without --json)."""
    out = tmp / "result.json"
    argv = [sys.executable, str(BENCH / case.script), *case.args, *(("--json", str(out)) if case.json else ())]
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=case.timeout)
    except subprocess.TimeoutExpired as error:
        raise AssertionError(f"bench/{case.script} {' '.join(case.args)} did not end within {case.timeout:.0f} s; "
                             f"its output:\n{(error.stdout or b'')[-3000:]!r}") from None
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, (f"bench/{case.script} {' '.join(case.args)} exited {done.returncode}:\n"
                                  f"{first_error(done.stdout + done.stderr)}...\n{tail}")
    if not case.json:
        assert done.stdout.strip(), f"bench/{case.script} printed no figures:\n{tail}"
        return {}
    result = json.loads(out.read_text())
    if case.script == "run.py":
        # run.py reports a benchmark's exception as an error row and goes on: none may be there.
        assert not result["errors"], f"bench/run.py {' '.join(case.args)}: {result['errors']}\n{tail}"
        benchmarks = {row["bench"] for row in result["rows"]}
        wanted = set(case.args[case.args.index("--only") + 1].split(","))
        assert wanted <= benchmarks, f"bench/run.py: no figure of {sorted(wanted - benchmarks)}\n{tail}"
    return result
