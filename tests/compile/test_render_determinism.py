"""The render is the same bytes in every process, whatever the string hash seed.

A set or a hash-ordered iteration in a compiler gives the same order twice in one process (so
test_golden's in-process check cannot see it) but a different order in the next process: a
spurious diff on every `pulumi preview` of an unchanged stack. So the rich fixture stack is
rendered by `python -m components render` in separate processes with different PYTHONHASHSEED
values, and every file must match byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.builders import FIXTURES, compile_stack, fixture_stack

REPO = Path(__file__).resolve().parents[2]
STACK = FIXTURES / "stacks" / "Pulumi.rich.yaml"
# "random" is Python's own setting: a fresh seed for that process.
SEEDS = ("0", "1", "12345", "random")


def _render(out: Path, seed: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.Popen([sys.executable, "-m", "components", "render", "--config", str(STACK), "--out", str(out)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_render_is_byte_identical_across_hash_seeds(tmp_path):
    runs = {seed: _render(tmp_path / f"seed-{seed}", seed) for seed in SEEDS}  # in parallel
    rendered = {}
    for seed, process in runs.items():
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, f"PYTHONHASHSEED={seed}: {stderr[-3000:]}"
        rendered[seed] = _files(tmp_path / f"seed-{seed}")
        assert f"wrote {len(rendered[seed])} manifest(s)" in stdout
    first, *others = SEEDS
    # Every object the stack compiles to is there (an empty render would match trivially).
    assert len(rendered[first]) == len(compile_stack(fixture_stack("rich"))), sorted(rendered[first])
    for seed in others:
        assert sorted(rendered[seed]) == sorted(rendered[first]), f"file names differ, PYTHONHASHSEED={seed}"
        changed = [name for name in rendered[first] if rendered[seed][name] != rendered[first][name]]
        assert not changed, f"PYTHONHASHSEED={seed} rendered these differently than {first}: {changed}"
