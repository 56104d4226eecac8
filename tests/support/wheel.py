"""The library as a user gets it: the wheel built from this checkout, installed in a virtualenv
of its own, outside the checkout (tests/library/test_wheel.py, the example program's test).

The wheel is built from a copy of the package sources (setuptools writes its egg-info and build
directories beside the sources: never in the checkout, which other tests read at the same time).
The virtualenv takes the pinned dependencies from the project's .venv through a .pth file rather
than downloading them again; llm_serving, components, contract and providers come from the wheel
alone, since the checkout is not on its path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from testkit.harness import REPO

SOURCES = ("pyproject.toml", "llm_serving", "components", "contract", "providers", "docs/library.md")


def build_wheel(dest: Path) -> Path:
    tree = dest / "src"
    for name in SOURCES:
        source, target = REPO / name, tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    out = dest / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(out), str(tree)], check=True, capture_output=True, text=True)
    (wheel,) = out.glob("llm_serving-*.whl")
    return wheel


def venv_with(wheel: Path, dest: Path) -> Path:
    """A virtualenv with ``wheel`` installed (no index) and the project's pinned dependencies
    visible: its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    python = dest / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    # Appended after the venv's own site-packages: the wheel's packages come first.
    (purelib / "llm_serving_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True, text=True)
    return python
