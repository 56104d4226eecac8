"""The engine kit from Python: the real vLLM for CPU at each release line the tests target, and the
tiny model made for it on this machine. Nothing here talks to a hub; the only network the kit's
first install needs is PyPI (scripts/testtools/vllm-kit.sh; locks and provenance in
scripts/testtools/vllm/README.md).

Entry points (the tests and bench/engine_path.py use them; all cache outside the repo, warm = instant):

- ``LINES``: the vLLM release lines the kit has, ``("0.11", "0.32")``.
- ``kit_dir(line) -> Path``: that line's venv (``bin/python``, ``bin/vllm``), installed on first
  use. Where the install fails the caller's test FAILS with the install's log tail; only where
  PyPI cannot be reached from this machine does it SKIP, saying so (``KitUnavailable``).
- ``vllm_cli(line, *args, env=None, timeout=120) -> CompletedProcess``: runs that line's real
  ``vllm`` CLI (e.g. ``vllm_cli("0.11", "serve", "/m", "--max-num-seqs", "abc")`` exits 2 with
  argparse's message on stderr, before loading anything). ``env`` is added to a minimal CPU
  environment (``cpu_env()``), never this process's.
- ``cpu_env(home) -> dict``: the environment a CPU server needs that a GPU pod does not
  (``CPU_ENV``: KV cache size, OpenMP binding, eager mode) plus PATH/HOME/LANG.
- ``tiny_model(line) -> Path``: a directory with ``model/`` (a 2-layer Llama trained here to
  fixed answers, a BPE tokenizer trained here, a ChatML template, bf16 safetensors) and
  ``adapter/`` (a peft LoRA of rank 8 for it, trained to other answers), made by
  testkit/make_model.py with that line's own transformers and peft.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT_SCRIPT = ROOT / "scripts" / "testtools" / "vllm-kit.sh"
MAKE_MODEL = Path(__file__).with_name("make_model.py")
LINES = ("0.11", "0.32")
NO_PYPI = 3  # vllm-kit.sh's exit status when PyPI cannot be reached

# What a CPU needs that the GPU pod's rendered env does not carry. VLLM_CPU_KVCACHE_SPACE: GiB
# for the KV cache (the CPU backend's stand-in for --gpu-memory-utilization, which it ignores);
# VLLM_CPU_OMP_THREADS_BIND: the cores, explicit because `auto` wants a NUMA node per rank and
# this machine has one; VLLM_CPU_CI_ENV=1: eager mode, no graph compile (a start in ~30 s).
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "VLLM_CPU_CI_ENV": "1",
}


class KitUnavailable(RuntimeError):
    """The kit cannot be installed because PyPI cannot be reached (the one reason to skip)."""


@cache
def _installed(line: str) -> Path:
    result = subprocess.run(["bash", str(KIT_SCRIPT), line], capture_output=True, text=True)
    if result.returncode == NO_PYPI:
        raise KitUnavailable(result.stderr.strip())
    if result.returncode != 0:
        raise RuntimeError(f"scripts/testtools/vllm-kit.sh {line} failed:\n{result.stderr[-4000:]}")
    out = subprocess.run(["bash", str(KIT_SCRIPT), "--print-dir", line], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip())


def kit_dir(line: str) -> Path:
    """The line's venv; skips (saying why) only when PyPI is unreachable, fails otherwise."""
    try:
        return _installed(line)
    except KitUnavailable as why:
        pytest.skip(f"vLLM {line} kit not installed: this machine cannot reach PyPI ({why})")


def cpu_env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **CPU_ENV}


def vllm_cli(line: str, *args: str, env: dict | None = None, timeout: float = 120,
             home: Path | None = None) -> subprocess.CompletedProcess:
    kit = kit_dir(line)
    home = home or Path(os.environ.get("TMPDIR", "/tmp"))
    full = {**cpu_env(home), "PATH": f"{kit / 'bin'}:/usr/bin:/bin", **(env or {})}
    return subprocess.run([str(kit / "bin" / "vllm"), *args], env=full, capture_output=True,
                          text=True, timeout=timeout)


@cache
def tiny_model(line: str) -> Path:
    """The line's tiny model and adapter, made once per (line, maker script) and cached beside the kit."""
    kit = kit_dir(line)
    key = hashlib.sha256(MAKE_MODEL.read_bytes()).hexdigest()[:12]
    out = kit.parent / "engine-models" / f"{kit.name}-maker-{key}"
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([str(kit / "bin" / "python"), str(MAKE_MODEL), str(out)],
                            capture_output=True, text=True, timeout=600,
                            env={**cpu_env(out.parent), "HF_HUB_OFFLINE": "1"})
    if result.returncode != 0:
        raise RuntimeError(f"make_model.py failed for vLLM {line}:\n{result.stderr[-4000:]}")
    return out
