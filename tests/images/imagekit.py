"""The image scripts (scripts/images/: stdlib-only, run with any python3) as modules for the tests."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "images"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import build  # noqa: E402
import oci  # noqa: E402
import private_containerd  # noqa: E402

__all__ = ["SCRIPTS", "build", "oci", "private_containerd"]
