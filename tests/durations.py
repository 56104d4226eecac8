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


def folder_of_report(nodeid: str) -> str:
    parts = Path(nodeid.split("::", 1)[0]).parts
    return "/".join(parts[:2]) if len(parts) > 2 else (parts[0] if parts else "?")


def module_of_report(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def totals_by(reports, key) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for report in reports:
        totals[key(report.nodeid)] += getattr(report, "duration", 0.0) or 0.0
    return dict(totals)


def folder_totals(reports) -> dict[str, float]:
    return totals_by(reports, folder_of_report)


def table(totals: dict[str, float], heading: str = "folder", width: int = 28) -> str:
    lines = [f"{heading:<{width}} {'seconds':>9}"]
    for folder, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        lines.append(f"{folder:<{width}} {seconds:>9.1f}")
    lines.append(f"{'total':<{width}} {sum(totals.values()):>9.1f}")
    return "\n".join(lines)


def timeline(reports) -> str:
    """When each module ran and on which worker (seconds from the first test's start): shows a
    side-by-side tier's tail, the module that ran last and alone."""
    spans: dict[str, list] = {}
    for report in reports:
        start, stop = getattr(report, "start", 0.0), getattr(report, "stop", 0.0)
        if not start:
            continue
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", "main")
        span = spans.setdefault(module_of_report(report.nodeid), [start, stop, worker])
        span[0], span[1] = min(span[0], start), max(span[1], stop)
    if not spans:
        return "module worker start end"
    zero = min(span[0] for span in spans.values())
    lines = [f"{'module':<64} {'worker':>6} {'start':>7} {'end':>7}"]
    for module, (start, stop, worker) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        lines.append(f"{module:<64} {worker:>6} {start - zero:>7.1f} {stop - zero:>7.1f}")
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
    # Per module too (not printed): what a scheduler of whole modules balances (the cluster tier).
    modules = table(totals_by(reports, module_of_report), heading="module", width=64)
    (out / f"{tier}.modules.txt").write_text(modules + "\n")
    (out / f"{tier}.timeline.txt").write_text(timeline(reports) + "\n")
