"""The command: runs `pulumi preview --json` in its streaming form (the only code here that runs
anything) and writes the report; ``python -m components preview-report`` calls ``command``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from .markdown import render
from .parsing import parse
from .summary import summarize

EXIT_PREVIEW_FAILED = 4
STREAMING = "PULUMI_ENABLE_STREAMING_JSON_PREVIEW"

# The engine settings of the previews this runs (measured on pulumi 3.274, bench/preview.py;
# docs/07-policy-and-ci-preview.md, "Fast previews", says why each is safe). PULUMI_SKIP_CHECKPOINTS: a preview still has
# the engine re-serialise the whole would-be state after every step (quadratic in resources:
# 47 s instead of 14 s at 100 models), and then throws it away: a preview writes no state, with
# or without it (checked: the backend's files are byte-identical after either). A value the
# caller's environment sets itself wins.
PREVIEW_ENV = {"PULUMI_SKIP_CHECKPOINTS": "true"}
# `--parallel`: pulumi 3.274 runs at most 8 steps at once by default; a preview's steps only check
# and diff (the Kubernetes provider's reads and dry runs, our providers' checks), so more at once
# is safe and shortens a large preview (100 models on the cluster stack: 21.2 -> 18.6 s here).
PREVIEW_PARALLEL = 64


def preview_environment(base: Optional[dict] = None) -> dict:
    """The environment a preview runs in: ``base`` (the process's by default), the fast-preview
    settings it does not set itself, and the streaming JSON form the report reads."""
    import os

    return {**PREVIEW_ENV, **(os.environ if base is None else base), STREAMING: "1"}


def preview_report(text: str, stack: str) -> str:
    """`pulumi preview --json` output (either form) -> the Markdown report."""
    return render(summarize(parse(text), stack))


class PreviewRunError(RuntimeError):
    pass


def preview_command(stack: str, policy_packs: Iterable[str] = (), policy_pack_configs: Iterable[str] = ()) -> list[str]:
    command = ["pulumi", "preview", "--json", "--non-interactive", "--stack", stack, "--parallel", str(PREVIEW_PARALLEL)]
    for pack in policy_packs:
        command += ["--policy-pack", pack]
    for config in policy_pack_configs:
        command += ["--policy-pack-config", config]
    return command


def run_preview(stack: str, policy_packs: Iterable[str] = (), policy_pack_configs: Iterable[str] = (),
                cwd: Optional[str] = None, timeout: float = 900, env: Optional[dict] = None) -> str:
    """Run `pulumi preview --json` in its streaming form and return what it printed.

    A failing preview (a mandatory policy violation, a program error) still prints its events
    and is reported, not raised; no output at all, or a timeout, raises PreviewRunError.
    """
    import subprocess

    environment = preview_environment(env)
    command = preview_command(stack, policy_packs, policy_pack_configs)
    try:
        result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise PreviewRunError("the pulumi CLI is not on PATH (source the toolchain's env.sh)") from None
    except subprocess.TimeoutExpired:
        raise PreviewRunError(f"`{' '.join(command)}` did not finish within {timeout:g}s") from None
    if not result.stdout.strip():
        raise PreviewRunError(f"`{' '.join(command)}` printed no JSON (exit {result.returncode}):\n"
                              f"{result.stderr.strip()[-3000:]}")
    return result.stdout


def command(args: Any) -> int:
    """`python -m components preview-report`: exit 0, or 4 when the preview failed (the report
    is written either way), 1 when there was nothing to report."""
    import sys
    from pathlib import Path

    try:
        if args.json_in:
            text = sys.stdin.read() if args.json_in == "-" else Path(args.json_in).read_text()
        else:
            text = run_preview(args.stack, args.policy_pack or (), args.policy_pack_config or (),
                               cwd=args.cwd, timeout=args.timeout)
            if args.save_json:
                Path(args.save_json).write_text(text)
        preview = parse(text)
    except (PreviewRunError, OSError, ValueError) as error:
        print(f"preview-report: {error}", file=sys.stderr)
        return 1
    markdown = render(summarize(preview, args.stack))
    if args.out:
        Path(args.out).write_text(markdown)
    else:
        sys.stdout.write(markdown)
    return EXIT_PREVIEW_FAILED if preview.failed_run else 0
