"""What a standalone bench prints and keeps: its result as JSON on stdout, and in a file when asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def emit(result: dict, path: Optional[Path]) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
