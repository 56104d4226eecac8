"""scripts/pieces.sh, the build steps the toolchain's bootstrap and the real node's build share:
a piece whose outputs are there is skipped, a missing one is built once and timed, a failing
command stops the run with its log's tail, a build that leaves its outputs missing stops it too."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

PIECES = Path(__file__).resolve().parents[1] / "scripts" / "pieces.sh"

HARNESS = """
set -euo pipefail
log() { echo "[t] $*"; }
die() { echo "[t] ERROR: $*" >&2; exit 1; }
PIECES_LOG_DIR=$DIR TIMINGS=$DIR/timings.log PIECES_TOTAL=2
source "$PIECES"
have_a() { [[ -f $DIR/a.out ]]; }
build_a() { q touch "$DIR/a.out"; }
have_b() { [[ -f $DIR/b.out ]]; }
build_b() { q sh -c "$B"; }
piece a have_a build_a
piece b have_b build_b
echo "built: ${PIECES_BUILT[*]}"
"""


def run(tmp_path: Path, b: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", HARNESS], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "DIR": str(tmp_path), "PIECES": str(PIECES), "B": b})


def test_a_missing_piece_is_built_once_and_a_present_one_skipped(tmp_path):
    first = run(tmp_path, f"touch {tmp_path}/b.out")
    assert first.returncode == 0, first.stderr
    assert "building a (1/2)" in first.stdout
    # Each piece's seconds are measured, so only their shape is fixed (a loaded machine takes 1 s).
    assert re.search(r"\nbuilt: a \d+s b \d+s$", first.stdout.rstrip()), first.stdout
    second = run(tmp_path, "exit 1")  # b is there now: its build is never run
    assert second.returncode == 0, second.stderr
    assert "a: present, skipping (1/2)" in second.stdout and "b: present, skipping (2/2)" in second.stdout
    assert [line.split()[1:3] for line in (tmp_path / "timings.log").read_text().splitlines()] == [
        ["cold-piece", "a"], ["cold-piece", "b"]]


def test_a_failing_command_stops_with_the_tail_of_its_log(tmp_path):
    result = run(tmp_path, "echo compiler says no; exit 3")
    assert result.returncode == 1
    assert "compiler says no" in result.stderr
    assert f"failed: sh -c echo compiler says no; exit 3 (full log: {tmp_path}/b.log)" in result.stderr
    assert "built:" not in result.stdout


def test_a_build_that_leaves_its_outputs_missing_stops(tmp_path):
    result = run(tmp_path, "true")
    assert result.returncode == 1
    assert "b: build finished but its outputs are missing" in result.stderr
