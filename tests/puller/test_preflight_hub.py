"""Preflight's I/O layer with the real huggingface_hub client against the loopback server: each
hub answer classified as the pure decisions expect (tests/preflight/test_preflight.py)."""

from __future__ import annotations

import socket

import pytest

from components.config import load_stack_config
from components.config.sources import DEFAULT_IGNORE_PATTERNS
from components.preflight import HubError, PreflightError, RepoState, preflight_stack
from components.preflight.hub import fetch
from testkit.hf_server import tiny_model_files

TINY = "acme/tiny"


def ask(hub, repo=TINY, revision="main", token=False):
    return fetch(hub.url, repo, revision, None, DEFAULT_IGNORE_PATTERNS, token=token, timeout=10)


def test_found_resolves_the_commit_with_sizes(hub):
    commit = hub.commit(TINY, tiny_model_files(), tags=("v1",))
    for revision in ("main", "v1", commit):
        answer, access = ask(hub, revision=revision)
        assert isinstance(answer, RepoState) and answer.commit == commit and access is None
    sizes = {f.path: f.size for f in answer.files}
    assert sizes["config.json"] == len(tiny_model_files()["config.json"])
    # metadata with blobs=True, then one HEAD of a file the puller fetches
    assert [(r.method, r.path) for r in hub.requests][-2:] == [
        ("GET", f"/api/models/{TINY}/revision/{commit}"), ("HEAD", f"/{TINY}/resolve/{commit}/config.json")]


@pytest.mark.parametrize("setup, repo, token, expected", [
    ({}, TINY, False, None),
    ({}, "acme/missing", False, HubError("unauthorized", "repository not found", 401)),
    ({}, "acme/missing", "hf_any", HubError("repo_not_found", "repository not found", 404)),
    ({"private": True, "allowed_tokens": {"hf_ok"}}, TINY, False, HubError("unauthorized", "repository not found", 401)),
    ({"private": True, "allowed_tokens": {"hf_ok"}}, TINY, "hf_other", HubError("repo_not_found", "repository not found", 404)),
    ({"private": True, "allowed_tokens": {"hf_ok"}}, TINY, "hf_ok", None),
])
def test_repo_access(hub, setup, repo, token, expected):
    hub.commit(TINY, tiny_model_files(), **setup)
    answer, access = ask(hub, repo=repo, token=token)
    if expected is None:
        assert isinstance(answer, RepoState) and access is None
    else:
        assert answer == expected


@pytest.mark.parametrize("token, expected", [
    (False, HubError("unauthorized", "gated repo", 401)),
    ("hf_other", HubError("forbidden", "gated repo", 403)),
    ("hf_ok", None),
])
def test_gated_metadata_is_public_so_a_file_is_read(hub, token, expected):
    hub.commit(TINY, tiny_model_files(), gated=True, allowed_tokens={"hf_ok"})
    answer, access = ask(hub, token=token)
    assert isinstance(answer, RepoState) and answer.gated
    assert access == expected


def test_missing_revision(hub):
    hub.commit(TINY, tiny_model_files())
    assert ask(hub, revision="v9")[0] == HubError("revision_not_found", "revision not found", 404)


def test_unreachable():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    answer, access = fetch(f"http://127.0.0.1:{port}", TINY, "main", token=False, timeout=5)
    assert answer.kind == "unreachable" and "ConnectError" in answer.detail and access is None


def test_stack_preflight_against_the_server(hub, monkeypatch):
    commit = hub.commit(TINY, tiny_model_files(weight_bytes=3 << 20))
    monkeypatch.setenv("LLM_SERVING_HF_PREFLIGHT_ENDPOINT", hub.url)
    raw = {"models": [{"name": "tiny", "source": {"repo": TINY}, "weights": {"size": "3Mi"}}]}
    with pytest.raises(PreflightError, match=r"models.0.weights.size: 3Mi \(3.0 MiB\) is too small .* set weights.size: 1Gi"):
        preflight_stack(load_stack_config(raw), token=False)
    raw["models"][0]["weights"]["size"] = "1Gi"
    report = preflight_stack(load_stack_config(raw), token=False)
    assert report.revisions == {"tiny": {"repo": TINY, "requested": "main", "commit": commit}}


def test_adapters_of_a_pvc_model_are_asked_of_the_server(hub, monkeypatch):
    # The base weights are on a claim (nothing to ask); the adapters still come from the Hub.
    commit = hub.commit("acme/sql-lora", {"adapter_config.json": b'{"peft_type": "LORA"}',
                                          "adapter_model.safetensors": b"\0" * 4096})
    monkeypatch.setenv("LLM_SERVING_HF_PREFLIGHT_ENDPOINT", hub.url)
    raw = {"models": [{"name": "tiny", "source": {"type": "pvc", "claimName": "shared-weights"}, "lora": {
        "enabled": True, "adapters": [{"name": "sql", "repo": "acme/sql-lora"}]}}]}
    report = preflight_stack(load_stack_config(raw), token=False)
    assert report.stack.models[0].lora.adapters[0].revision == commit
    assert report.revisions == {"tiny": {"adapters": {"sql": {"repo": "acme/sql-lora", "requested": "main",
                                                              "commit": commit}}}}
    raw["models"][0]["lora"]["adapters"].append({"name": "gone", "repo": "acme/gone-lora"})
    with pytest.raises(PreflightError) as refused:
        preflight_stack(load_stack_config(raw), token=False)
    (line,) = refused.value.problems
    # No token sent: the server answers 401 for a repo it does not have (as the Hub does).
    assert line.startswith("models.0.lora.adapters.1.repo: token lacks access to acme/gone-lora"), line
