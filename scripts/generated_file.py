"""The command line both generators share (scripts/gen_config_reference.py, scripts/gen_library_types.py):
write the generated file, or with --check exit 1 when the committed one differs from what the
code would write now, naming the script that regenerates it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def main(argv: list[str] | None, *, description: str, render: Callable[[], str], output: Path,
         root: Path, script: str) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file is stale")
    parser.add_argument("--output", type=Path, default=output, help=f"default: {output.relative_to(root)}")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else None
        if current != text:
            what = "is missing" if current is None else "is stale"
            print(f"{args.output} {what}: the config model changed. Run "
                  f"`python scripts/{script}` and commit the result.", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0
