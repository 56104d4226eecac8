"""No invented image digests in what users copy: the stacks, their fixtures and the docs.

A digest pins an image only when it is the registry's own digest for that image; an invented one
(the gpu-cluster example once carried a sequential-hex "example" pylon digest) fails every pull.
A digest may appear only when it is listed here with where it was read from; none could be read
where this project is developed (no registry access), so the examples pin released tags and say
how to add the real digest (see the header of stacks/Pulumi.gpu-cluster.yaml and the
llm-serving-image-pinned policy rule). Unit tests use visibly synthetic digests ("a" * 64) as
inputs to validation; those never reach a stack file.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

# digest -> the registry and command it was read with (e.g. "crane digest <ref>, 2026-12-01").
VERIFIED: dict[str, str] = {}


def shipped_files() -> list[Path]:
    files = [*ROOT.glob("stacks/*.yaml"), *ROOT.glob("tests/fixtures/stacks/*.yaml"), ROOT / "README.md",
             *ROOT.glob("docs/*.md")]
    return [f for f in files if f.is_file()]


def test_every_digest_in_stacks_and_docs_was_read_from_a_registry():
    found = {(f.relative_to(ROOT).as_posix(), d) for f in shipped_files() for d in DIGEST.findall(f.read_text())}
    assert [(path, digest) for path, digest in sorted(found) if digest not in VERIFIED] == []


def test_the_check_sees_a_digest(tmp_path):
    # The pattern the check relies on matches the pinned form a stack file would carry.
    assert DIGEST.findall("docker.io/library/busybox:1.37.0@sha256:" + "0123456789abcdef" * 4)
