"""Where the time goes: the test command's per-folder totals.

pytest's ``--durations`` names the slowest tests; this adds, at the end of every run, the wall
time summed per top-level test folder (setup + call + teardown of each test) and writes the same
table to ``.test-durations/<tier>.txt`` (the marker expression of the run, or ``all``), so the
figures can go into docs/10-benchmarks.md. With pytest-xdist the sums are of the workers' time.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path

from tests.tiers import TESTS

REPO = TESTS.parent


def folder_totals(reports) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for report in reports:
        path = report.nodeid.split("::", 1)[0]
        parts = Path(path).parts
        folder = "/".join(parts[:2]) if len(parts) > 2 else (parts[0] if parts else "?")
        totals[folder] += getattr(report, "duration", 0.0) or 0.0
    return dict(totals)


def table(totals: dict[str, float]) -> str:
    lines = [f"{'folder':<28} {'seconds':>9}"]
    for folder, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        lines.append(f"{folder:<28} {seconds:>9.1f}")
    lines.append(f"{'total':<28} {sum(totals.values()):>9.1f}")
    return "\n".join(lines)


def report_durations(terminalreporter, config) -> None:
    reports = [r for key in ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "")
               for r in terminalreporter.stats.get(key, []) if hasattr(r, "nodeid") and hasattr(r, "when")]
    if not reports:
        return
    text = table(folder_totals(reports))
    terminalreporter.write_sep("=", "time per test folder (setup + call + teardown)")
    terminalreporter.write_line(text)
    # LLM_SERVING_DURATIONS_NAME: a run of its own within a tier (a cluster-wide group, scripts/test.sh).
    name = os.environ.get("LLM_SERVING_DURATIONS_NAME") or config.option.markexpr or "all"
    tier = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "all"
    out = REPO / ".test-durations"
    out.mkdir(exist_ok=True)
    (out / f"{tier}.txt").write_text(text + "\n")
