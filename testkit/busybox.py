"""The puller scripts' shell and commands as the image has them: busybox's, when this machine has
busybox (the image is Alpine), else the host's (tests/puller, bench/s3_puller_throughput.py)."""

from __future__ import annotations

import shutil
from pathlib import Path


def shell() -> list[str]:
    return ["busybox", "sh"] if shutil.which("busybox") else ["sh"]


# The commands the scripts run besides rclone: the image (Alpine) has them as busybox applets.
APPLETS = ("awk", "cat", "cut", "dd", "find", "grep", "head", "md5sum", "nproc", "printf", "rm", "sed", "sort", "stat",
           "tr")


def applets(tmp: Path) -> str:
    """A PATH entry with busybox's applets for the scripts' commands ('' without busybox)."""
    busybox = shutil.which("busybox")
    if not busybox:
        return ""
    folder = tmp.parent / "busybox-applets"
    folder.mkdir(exist_ok=True)
    for name in APPLETS:
        if not (folder / name).exists():
            (folder / name).symlink_to(busybox)
    return f"{folder}:"
