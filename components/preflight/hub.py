"""The thin I/O layer: two huggingface_hub calls per model, their outcomes classified.

1. ``HfApi(endpoint).model_info(repo, revision, files_metadata=True)``: the commit the revision
   resolves to (``.sha``) and every file with its size (``.siblings``).
2. A HEAD of one file the puller will fetch (``get_hf_file_metadata``): gated repos publish
   their metadata to anyone, so only reading a file tells whether the token has access.

The token is huggingface_hub's own (``HF_TOKEN`` or ``hf auth login`` on the machine running
preview) unless one is passed; it is sent to the endpoint only and never logged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional, Union

import httpx2
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from .decide import Answer, HubError, HubFile, RepoState, probe_file

TIMEOUT_SECONDS = 15.0


def classify(error: BaseException) -> HubError:
    """A huggingface_hub / transport exception as a preflight ``HubError``."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, GatedRepoError):  # a RepositoryNotFoundError subclass: test it first
        return HubError("unauthorized" if status == 401 else "forbidden", "gated repo", status)
    if isinstance(error, RevisionNotFoundError):
        return HubError("revision_not_found", "revision not found", status)
    if isinstance(error, RepositoryNotFoundError):
        # Without a valid token the hub answers 401 for private, gated and missing repos alike.
        return HubError("unauthorized" if status == 401 else "repo_not_found", "repository not found", status)
    if isinstance(error, OfflineModeIsEnabled):
        return HubError("unreachable", "HF_HUB_OFFLINE is set on this machine")
    if isinstance(error, HfHubHTTPError):
        if status == 401:
            return HubError("unauthorized", "HTTP 401", status)
        if status == 403:
            return HubError("forbidden", "HTTP 403", status)
        if status == 404:
            return HubError("repo_not_found", "HTTP 404", status)
        return HubError("unreachable", f"HTTP {status}" if status else str(error).splitlines()[0], status)
    if isinstance(error, httpx2.TimeoutException):
        return HubError("unreachable", f"timed out ({type(error).__name__})")
    if isinstance(error, (httpx2.TransportError, OSError)):
        return HubError("unreachable", f"{type(error).__name__}: {error}".splitlines()[0][:200])
    raise error


def fetch(endpoint: str, repo: str, revision: str, allow: Optional[Iterable[str]] = None,
          ignore: Iterable[str] = (), token: Union[str, bool, None] = None,
          timeout: float = TIMEOUT_SECONDS) -> tuple[Answer, Optional[HubError]]:
    """(what the hub says about repo@revision, the outcome of reading one file the puller fetches)."""
    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(
            repo, revision=revision, files_metadata=True, timeout=timeout)
    except Exception as error:  # noqa: BLE001 - classify() re-raises what it does not know
        return classify(error), None
    if not info.sha:
        return HubError("unreachable", f"{endpoint} answered without a commit id for {repo}@{revision}; "
                        "is it a Hugging Face-compatible endpoint?"), None
    state = RepoState(
        commit=info.sha,
        files=tuple(HubFile(s.rfilename, s.size) for s in info.siblings or ()),
        gated=bool(info.gated), private=bool(info.private),
    )
    filename = probe_file(state, allow, ignore)
    if filename is None:
        return state, None
    try:
        get_hf_file_metadata(hf_hub_url(repo, filename, revision=state.commit, endpoint=endpoint),
                             token=token, timeout=timeout, endpoint=endpoint)
    except RemoteEntryNotFoundError:
        return state, None
    except Exception as error:  # noqa: BLE001
        return state, classify(error)
    return state, None
