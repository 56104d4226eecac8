"""Where the tests find the operators' real CRDs (no hand-written stand-ins).

- LeaderWorkerSet, KEDA, prometheus-operator and cert-manager: the generated CRDs shipped in
  their Go modules, extracted by ``scripts/toolchain/operators.sh`` into the operators cache
  (``$LLM_SERVING_CRDS_DIR``, set by ``scripts/test.sh``; otherwise found from
  ``scripts/toolchain/versions.sh``). Missing, the test fails and says how to build them.
- The NIM operator's: its Go module is not served, so they come from the shared vendor copy
  ``../shared/vendor/nim-operator-crds/<version>`` beside the repository (for a git worktree,
  beside its main checkout; or ``$LLM_SERVING_SHARED_DIR``). Where it is absent,
  ``nim_operator_crds`` returns None and the tests that need it skip, saying why.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
# The NIM operator releases whose CRDs are vendored: the newest tag (what the Helm chart installs)
# and main at f63f74d7ad22 (2026-08-19), the API the compiler follows.
NIM_OPERATOR_RELEASES = ("v3.1.2", "main-f63f74d")
NIM_OPERATOR_RELEASE = "main-f63f74d"


def operators_crds_dir() -> Path:
    """The operators cache's ``crds/`` (one folder per operator)."""
    given = os.environ.get("LLM_SERVING_CRDS_DIR")
    if given:
        path = Path(given)
    else:
        script = f'source "{REPO}/scripts/toolchain/versions.sh" && echo "$OPERATORS_DIR/crds"'
        path = Path(subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.strip())
    if not path.is_dir():
        pytest.fail(f"the operators' CRDs are not at {path}: run scripts/toolchain/operators.sh "
                    "(scripts/test.sh does)")
    return path


def operator_crd(operator: str, file_name: str) -> Path:
    """One CRD file of ``operator`` (lws, keda, prometheus-operator, cert-manager)."""
    path = operators_crds_dir() / operator / file_name
    if not path.is_file():
        pytest.fail(f"{path} is missing: the operators cache is incomplete; rerun scripts/toolchain/operators.sh")
    return path


def shared_dir() -> Optional[Path]:
    """``../shared`` beside the repository (for a git worktree: beside its main checkout)."""
    given = os.environ.get("LLM_SERVING_SHARED_DIR")
    candidates = [Path(given)] if given else []
    candidates.append(REPO.parent / "shared")
    git = REPO / ".git"
    if git.is_file():  # a worktree: "gitdir: <main checkout>/.git/worktrees/<name>"
        gitdir = Path(git.read_text().split(":", 1)[1].strip())
        candidates.append(gitdir.parents[2].parent / "shared")
    return next((path for path in candidates if path.is_dir()), None)


def nim_operator_crds(release: str = NIM_OPERATOR_RELEASE) -> Optional[list[Path]]:
    """The vendored NIMCache and NIMService CRDs of ``release``, or None where they are absent."""
    shared = shared_dir()
    if shared is None:
        return None
    folder = shared / "vendor" / "nim-operator-crds" / release
    files = [folder / "apps.nvidia.com_nimcaches.yaml", folder / "apps.nvidia.com_nimservices.yaml"]
    return files if all(path.is_file() for path in files) else None


NIM_CRDS_ABSENT = ("the NIM operator's CRDs are vendored in ../shared/vendor/nim-operator-crds, absent on this "
                   "machine (its Go module is not served): the NIM-operator tests need them")


@functools.lru_cache(maxsize=16)
def structural_schema(crd_file: Path, version: str) -> dict:
    """A CRD version's openAPIV3Schema as JSON Schema that, like the API server's pruning under
    server-side apply, refuses fields it does not declare (CEL rules are not evaluated)."""
    import copy

    import yaml

    crd = yaml.safe_load(Path(crd_file).read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = copy.deepcopy(served["schema"]["openAPIV3Schema"])

    def walk(node) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema
