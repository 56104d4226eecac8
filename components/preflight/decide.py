"""Preflight decisions: pure functions from (what the config asks, what the hub answered) to a
verdict. No I/O here: ``hub.py`` turns huggingface_hub responses and exceptions into the
``RepoState`` / ``HubError`` values below, so every case is table-testable.

A verdict says which revision the puller downloads (the resolved commit when pinning), and
carries errors (the stack must not deploy), warnings and notes, each one line that says what to
change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal, Optional, Union

from huggingface_hub.utils import filter_repo_objects

from ..config import values

# Files a vLLM server can load weights from; used to notice patterns that leave none.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
GI = 2**30

ErrorKind = Literal["unauthorized", "forbidden", "repo_not_found", "revision_not_found", "unreachable"]


@dataclass(frozen=True)
class HubFile:
    path: str
    size: Optional[int]  # None when the endpoint did not report it


@dataclass(frozen=True)
class RepoState:
    """The hub's answer for repo@revision: the commit it resolves to and its files."""

    commit: str
    files: tuple[HubFile, ...]
    gated: bool = False
    private: bool = False


@dataclass(frozen=True)
class HubError:
    """A failed hub call, classified. ``detail`` is a short human reason, never a token."""

    kind: ErrorKind
    detail: str
    status: Optional[int] = None


Answer = Union[RepoState, HubError]


@dataclass(frozen=True)
class Check:
    """What one model's config asks of the hub (plain data, built from the config)."""

    repo: str
    revision: str
    endpoint: str
    pin: bool = True
    allow_patterns: Optional[tuple[str, ...]] = None
    ignore_patterns: tuple[str, ...] = ()
    volume_size: str = "50Gi"
    volume_size_default: bool = False  # the model leaves weights.size unset: the built-in default
    headroom_percent: int = 10
    # Revisions the volume holds at once: 2 for per-pod multi-node weights (multiNode.weights:
    # perPod), whose pods pull a new revision beside the old one and prune the old only after the
    # new one verifies; a volume sized for one would fill up in the middle of the next change.
    revisions_held: int = 1
    on_unreachable: Literal["fail", "warn"] = "fail"
    token_secret: Optional[str] = None  # "name/key" of the puller's Secret, for messages
    # Preflight used the stack's `llm-serving:hfToken` (the value of that very Secret) instead of
    # the token of the machine running preview.
    token_from_stack: bool = False

    @property
    def ref(self) -> str:
        return f"{self.repo}@{self.revision}"


@dataclass(frozen=True)
class Problem:
    """One line for the user; ``field`` is the config path (relative to the model) to change."""

    field: str
    message: str


@dataclass(frozen=True)
class Verdict:
    revision: str                     # what the puller downloads
    commit: Optional[str] = None      # the commit the hub resolved the revision to, when known
    errors: tuple[Problem, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    download_bytes: Optional[int] = None

    @property
    def pinned(self) -> bool:
        return self.commit is not None and self.revision == self.commit


# -- small pure helpers -------------------------------------------------------------------------

def selected(files: Iterable[HubFile], allow: Optional[Iterable[str]], ignore: Iterable[str]) -> list[HubFile]:
    """The files `hf download --include/--exclude` fetches: huggingface_hub's own filter
    (fnmatch, where `*` also matches `/`, and a pattern ending in `/` means the whole folder)."""
    return list(filter_repo_objects(
        list(files), allow_patterns=list(allow) if allow is not None else None,
        ignore_patterns=list(ignore) or None, key=lambda item: item.path,
    ))


def human(size: Union[int, Decimal]) -> str:
    size = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def needed_bytes(download: int, headroom_percent: int) -> int:
    return math.ceil(download * (100 + headroom_percent) / 100)


def held_note(revisions_held: int) -> str:
    """Why the need is a multiple of the download (empty when it is not)."""
    if revisions_held == 1:
        return ""
    return (f" for {revisions_held} revisions (a per-pod volume keeps the serving revision while the next "
            "is pulled beside it: multiNode.weights: perPod)")


def recommended_size(download: int, headroom_percent: int) -> str:
    """The smallest whole-Gi volume that holds the download with headroom."""
    return f"{max(1, math.ceil(needed_bytes(download, headroom_percent) / GI))}Gi"


def probe_file(state: RepoState, allow: Optional[Iterable[str]], ignore: Iterable[str]) -> Optional[str]:
    """A file the puller will fetch, to check the token can read files (gated repos publish their
    metadata to everyone): config.json when selected, else the first selected file."""
    paths = [f.path for f in selected(state.files, allow, ignore)]
    return "config.json" if "config.json" in paths else (paths[0] if paths else None)


# -- the decision -------------------------------------------------------------------------------

def _access_problem(check: Check, error: HubError) -> Problem:
    why = {
        "forbidden": f"{check.repo} is gated or private and this token is not authorized "
                     "(HTTP 403): accept the repo's conditions on the hub with the token's account",
        "unauthorized": "HTTP 401: no valid token was sent, and the repo is gated or private "
                        "(the hub also answers 401 for a repo that does not exist: check source.repo)",
    }[error.kind]
    if check.token_from_stack:
        where = (f"the puller reads Secret {check.token_secret}, made from the stack's "
                 "llm-serving:hfToken, which preflight used: set a token with access "
                 "(`pulumi config set --secret llm-serving:hfToken ...`)")
    elif check.token_secret:
        where = (f"the puller reads Secret {check.token_secret}; preflight used this machine's token "
                 "(HF_TOKEN or `hf auth login`), give it the same token")
    else:
        where = "the model sets no hfTokenSecret"
    return Problem("hfTokenSecret" if check.token_secret else "source.repo",
                   f"token lacks access to {check.repo}; request access or fix the secret ({why}; {where})")


def _failure(check: Check, error: HubError) -> Verdict:
    if error.kind in ("unauthorized", "forbidden"):
        return Verdict(check.revision, errors=(_access_problem(check, error),))
    if error.kind == "repo_not_found":
        return Verdict(check.revision, errors=(Problem("source.repo", (
            f"repo '{check.repo}' not found at {check.endpoint}; check source.repo (a private repo "
            "the token cannot see is reported the same way: check hfTokenSecret too)")),))
    if error.kind == "revision_not_found":
        return Verdict(check.revision, errors=(Problem("source.revision", (
            f"revision '{check.revision}' not found in {check.repo} at {check.endpoint}; use an "
            "existing branch, tag or full 40-hex commit id")),))
    # unreachable
    if check.on_unreachable == "fail":
        return Verdict(check.revision, errors=(Problem("source", (
            f"cannot reach {check.endpoint} to check {check.ref}: {error.detail}; fix the endpoint "
            "or the network, or set platform.preflight.onUnreachable: warn to deploy it unpinned "
            "and unchecked")),))
    moving = check.pin and not values.COMMIT_SHA.match(check.revision)
    return Verdict(check.revision, warnings=(
        f"cannot reach {check.endpoint} ({error.detail}): deploying {check.ref} unpinned and "
        "unchecked (platform.preflight.onUnreachable: warn)"
        + ("; a stack deployed pinned before re-pulls its weights into a new volume" if moving else ""),
    ))


def decide(check: Check, answer: Answer, access: Optional[HubError] = None) -> Verdict:
    """One model's verdict. ``access`` is the outcome of reading one file the puller will fetch
    (None: readable, or not probed)."""
    if isinstance(answer, HubError):
        return _failure(check, answer)
    if access is not None:
        if access.kind in ("unauthorized", "forbidden", "repo_not_found"):
            kind = "forbidden" if access.kind == "repo_not_found" else access.kind
            return Verdict(check.revision, answer.commit, errors=(_access_problem(check, HubError(kind, access.detail)),))
        if access.kind != "revision_not_found":
            return _failure(check, access)

    errors: list[Problem] = []
    warnings: list[str] = []
    notes: list[str] = []
    revision = answer.commit if check.pin else check.revision
    if check.pin and check.revision != answer.commit:
        notes.append(f"{check.ref} pinned to commit {answer.commit}")
    elif not check.pin and check.revision != answer.commit:
        notes.append(f"{check.ref} not pinned (pin: false): it is at {answer.commit} now; the "
                     "puller downloads whatever it is when the puller runs")

    chosen = selected(answer.files, check.allow_patterns, check.ignore_patterns)
    weights = [f for f in answer.files if f.path.endswith(WEIGHT_SUFFIXES)]
    chosen_weights = [f for f in chosen if f.path.endswith(WEIGHT_SUFFIXES)]
    if weights and not chosen_weights:
        sample = ", ".join(sorted(f.path for f in weights)[:3])
        errors.append(Problem("source.ignorePatterns", (
            f"the allow/ignore patterns leave none of {check.repo}'s weight files to download "
            f"({sample}); change source.allowPatterns or source.ignorePatterns")))
    kinds = {f.path.rsplit(".", 1)[-1] for f in chosen_weights}
    if "safetensors" in kinds and "bin" in kinds:
        duplicate = sum(f.size or 0 for f in chosen_weights if f.path.endswith(".bin"))
        warnings.append(f"{check.ref} downloads both *.safetensors and *.bin weights "
                        f"({human(duplicate)} of .bin that vLLM does not load); add '*.bin' to "
                        "source.ignorePatterns")

    unknown = [f.path for f in chosen if f.size is None]
    download = sum(f.size or 0 for f in chosen)
    if unknown:
        warnings.append(f"{check.endpoint} did not report the size of {len(unknown)} file(s) of "
                        f"{check.ref} (e.g. {unknown[0]}): size check skipped")
        download_bytes = None
    else:
        download_bytes = download
        capacity = values.parse_quantity(check.volume_size)
        need = needed_bytes(download * check.revisions_held, check.headroom_percent)
        notes.append(f"{check.ref}: {len(chosen)} files, {human(download)} to download "
                     f"(weights.size {check.volume_size})")
        if need > capacity:
            which = (f"the default weights.size ({check.volume_size}, {human(capacity)}; the model "
                     "does not set it)" if check.volume_size_default
                     else f"{check.volume_size} ({human(capacity)})")
            errors.append(Problem("weights.size", (
                f"{which} is too small for {check.repo}: the files "
                f"it downloads after allow/ignore patterns total {human(download)}, "
                f"{human(need)}{held_note(check.revisions_held)} with {check.headroom_percent}% headroom; "
                f"set weights.size: {recommended_size(download * check.revisions_held, check.headroom_percent)}")))
    return Verdict(revision, answer.commit, tuple(errors), tuple(warnings), tuple(notes), download_bytes)
