"""Commands beside Pulumi for the people who run it: validate, render, status, targets.

    python -m components validate --stack NAME | --config FILE
    python -m components render   --stack NAME | --config FILE  --out DIR
    python -m components status   --stack NAME | --config FILE  [--json]
    python -m components targets  --stack NAME | --config FILE  [--json]
    python -m components preview-report --stack NAME [--json-in FILE] [--out FILE] [--policy-pack DIR]

Exit codes: 0 success, 2 invalid config (one `field.path: reason` line per problem on
stderr, nothing written), 3 `status` found a model that is not READY (`targets`: no router
pod, or a fronted model without a pod whose pylon is ready), 4 `preview-report` wrote its report but the preview failed (e.g. a
mandatory policy violation), 1 anything else.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from providers.kube import NoClusterConfig

from .compile import compile_stack
from .compile.gateway import endpoint_url
from .compile.router import compile_router
from .config import ConfigError, StackConfig, load_stack_config, read_stack_file, stack_file
from .config.router import no_pylon_warning
from .preview_report import command as preview_report
from .status_cli import print_status

EXIT_INVALID = 2


def _load(args: argparse.Namespace) -> StackConfig:
    path = Path(args.config) if args.config else stack_file(args.stack)
    return load_stack_config(read_stack_file(path))


def manifest_filename(index: int, manifest: dict) -> str:
    meta = manifest["metadata"]
    namespace = meta.get("namespace", "_cluster")
    return f"{index:03d}-{manifest['kind'].lower()}-{namespace}-{meta['name']}.yaml"


def render(stack: StackConfig, out: Path) -> list[Path]:
    manifests = compile_stack(stack)
    out.mkdir(parents=True, exist_ok=True)
    # libyaml's dumper when PyYAML was built with it: the same bytes as the pure-Python one,
    # several times faster (most of a large stack's render time was YAML emission).
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    written = []
    for index, manifest in enumerate(manifests):
        path = out / manifest_filename(index, manifest)
        path.write_text(yaml.dump(manifest, Dumper=dumper, sort_keys=True))
        written.append(path)
    return written


def _cmd_validate(args: argparse.Namespace) -> int:
    stack = _load(args)
    line = f"valid: {len(stack.models)} model(s) in namespace {stack.platform.namespace}"
    if stack.router is not None:
        topology = compile_router(stack).topology
        line += f"; router {stack.router.name}: {topology.reason}"
        if stack.router.gateway.enabled:
            keys = "API keys" if stack.router.gateway.api_keys else "open, no API keys"
            line += f"; clients call the gateway at {endpoint_url(stack)}/v1 ({keys})"
    print(line)
    warning = no_pylon_warning(stack.router) if stack.router is not None else None
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    stack = _load(args)  # validated before a single file is written
    if Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"--out {args.out}: is a file; pass a directory to write the manifests into", file=sys.stderr)
        return EXIT_INVALID
    written = render(stack, Path(args.out))
    print(f"wrote {len(written)} manifest(s) to {args.out}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    return print_status(_load(args), as_json=args.json)


def _cmd_targets(args: argparse.Namespace) -> int:
    # Only `targets` loads the Pulumi SDK (providers.router_targets imports pulumi.dynamic, about
    # 0.3 s and grpc): every other command starts without it.
    from .targets_cli import print_router_targets

    return print_router_targets(_load(args), as_json=args.json)


def _cmd_preview_report(args: argparse.Namespace) -> int:
    return preview_report(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m components", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def source(p: argparse.ArgumentParser) -> None:
        group = p.add_mutually_exclusive_group(required=True)
        group.add_argument("--stack", help="stack name: reads stacks/Pulumi.<stack>.yaml")
        group.add_argument("--config", help="a file in Pulumi stack config format")

    p = sub.add_parser("validate", help="check a stack's config; exit 2 with one line per problem")
    source(p)
    p.set_defaults(run=_cmd_validate)
    p = sub.add_parser("render", help="write every manifest the stack declares, no cluster needed")
    source(p)
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(run=_cmd_render)
    p = sub.add_parser("status", help="live status of every model of the stack")
    source(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=_cmd_status)
    p = sub.add_parser("targets", help="what the router can reach, live: its pods and, per fronted model, "
                       "the pods whose pylon is ready")
    source(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=_cmd_targets)
    p = sub.add_parser("preview-report", help="Markdown summary of `pulumi preview` for a pull request")
    p.add_argument("--stack", required=True, help="stack to preview (and the report's title)")
    p.add_argument("--json-in", help="summarize this saved `pulumi preview --json` output (`-`: stdin) "
                   "instead of running pulumi")
    p.add_argument("--out", help="write the Markdown here (default: stdout)")
    p.add_argument("--policy-pack", action="append", help="run this policy pack (e.g. policies)")
    p.add_argument("--policy-pack-config", action="append", help="its config (e.g. policies/config.example.json)")
    p.add_argument("--save-json", help="also save the preview's JSON here (a CI artifact)")
    p.add_argument("--cwd", help="project directory (default: the current one)")
    p.add_argument("--timeout", type=float, default=900, help="seconds the preview may take (default 900)")
    p.set_defaults(run=_cmd_preview_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except ConfigError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        return EXIT_INVALID
    except NoClusterConfig as error:  # `targets` without a kubeconfig: which one, and the fix
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # a path the command cannot read or write: say which, no traceback
        print(f"error: {error.strerror or error}: {error.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1
