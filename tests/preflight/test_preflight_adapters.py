"""Preflight of `lora.adapters` (issue 15 item 4): pinned like the base model, checked for what
vLLM's filesystem resolver needs, and the pinned commit is what the init container downloads."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from components.config.lora import VLLM_MAX_LORA_RANKS
from components.config.sources import S3Object
from components.preflight import HubError, HubFile, PreflightError, RepoState, preflight_stack
from components.preflight.s3 import Listing
from tests.support.builders import REPO, compile_model, container, model, stack

SHA_A, SHA_B, SHA_C = "a" * 40, "b" * 40, "c" * 40
GIB = 2**30
ADAPTER_FILES = (HubFile("adapter_config.json", 700), HubFile("adapter_model.safetensors", 50 * 2**20))


class Hub:
    def __init__(self, answers: dict):
        self.answers, self.asked = answers, []

    def __call__(self, endpoint, repo, revision, allow, ignore, token=None):
        self.asked.append((repo, revision, token))
        answer = self.answers[repo]
        return answer if isinstance(answer, tuple) else (answer, None)


def base(commit=SHA_A):
    return RepoState(commit, (HubFile("config.json", 10), HubFile("model.safetensors", GIB)))


def adapter_state(commit=SHA_B, files=ADAPTER_FILES):
    return RepoState(commit, tuple(files))


def lora_stack(*adapters, cache="10Gi", **fields):
    return stack(model("m", weights={"size": "5Gi"},
                       lora={"enabled": True, "cacheSizeLimit": cache, "adapters": list(adapters)}, **fields))


def test_adapter_branch_is_pinned_and_the_init_container_downloads_the_commit():
    config = lora_stack({"name": "sql", "repo": "acme/sql-lora"})
    report = preflight_stack(config, fetch=Hub({REPO: base(), "acme/sql-lora": adapter_state(SHA_B)}), env={})
    (adapter,) = report.stack.models[0].lora.adapters
    assert adapter.revision == SHA_B
    assert report.revisions["m"]["adapters"] == {"sql": {"repo": "acme/sql-lora", "requested": "main", "commit": SHA_B}}
    init = container(compile_model(report.stack.models[0], report.stack).deployment, "lora-cache-init")
    assert init["command"][-3:] == ["sql", "acme/sql-lora", SHA_B]


def test_moved_adapter_changes_the_server_only_never_the_base_weights():
    config = lora_stack({"name": "sql", "repo": "acme/sql-lora"})
    deployed = []
    for commit in (SHA_B, SHA_C):
        report = preflight_stack(config, fetch=Hub({REPO: base(), "acme/sql-lora": adapter_state(commit)}), env={})
        deployed.append(compile_model(report.stack.models[0], report.stack))
    old, new = deployed
    assert (old.weights_pvc, old.puller_job) == (new.weights_pvc, new.puller_job)
    assert old.deployment != new.deployment


def test_adapter_without_adapter_config_is_refused_at_its_repo():
    config = lora_stack({"name": "sql", "repo": "acme/not-an-adapter"})
    hub = Hub({REPO: base(), "acme/not-an-adapter": adapter_state(files=[HubFile("model.safetensors", 10)])})
    with pytest.raises(PreflightError) as caught:
        preflight_stack(config, fetch=hub, env={})
    (line,) = caught.value.problems
    assert line.startswith("models.0.lora.adapters.0.repo: acme/not-an-adapter@main has no adapter_config.json")


def test_missing_adapter_revision_is_reported_at_the_adapters_revision():
    config = lora_stack({"name": "a", "repo": "acme/a"}, {"name": "b", "repo": "acme/b", "revision": "v9"})
    hub = Hub({REPO: base(), "acme/a": adapter_state(), "acme/b": HubError("revision_not_found", "revision not found", 404)})
    with pytest.raises(PreflightError) as caught:
        preflight_stack(config, fetch=hub, env={})
    (line,) = caught.value.problems
    assert line.startswith("models.0.lora.adapters.1.revision: revision 'v9' not found in acme/b")


def test_adapters_together_must_fit_the_adapter_cache():
    big = (HubFile("adapter_config.json", 1), HubFile("adapter_model.safetensors", 700 * 2**20))
    config = lora_stack({"name": "a", "repo": "acme/a"}, {"name": "b", "repo": "acme/b"}, cache="1Gi")
    hub = Hub({REPO: base(), "acme/a": adapter_state(files=big), "acme/b": adapter_state(files=big)})
    with pytest.raises(PreflightError) as caught:
        preflight_stack(config, fetch=hub, env={})
    (line,) = caught.value.problems
    assert line.startswith("models.0.lora.cacheSizeLimit: 1Gi")


def test_adapters_are_asked_with_the_models_token():
    config = load_stack_config({"hfToken": {"secure": "x"}, "models": [
        {"name": "m", "source": {"repo": REPO}, "weights": {"size": "5Gi"},
         "lora": {"enabled": True, "adapters": [{"name": "sql", "repo": "acme/sql-lora"}]}}]})
    hub = Hub({REPO: base(), "acme/sql-lora": adapter_state()})
    preflight_stack(config, fetch=hub, env={}, token=None, stack_token="stack-token")
    assert [token for _, _, token in hub.asked] == ["stack-token", "stack-token"]


# --- config ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rank", [1, 4, 48, 100, 1024])
def test_max_lora_rank_outside_vllm_0_11_is_refused(rank):
    with pytest.raises(ConfigError) as caught:
        stack(model(lora={"enabled": True, "maxLoraRank": rank}))
    assert "models.0.lora.maxLoraRank" in str(caught.value)


@pytest.mark.parametrize("rank", VLLM_MAX_LORA_RANKS)
def test_every_vllm_rank_is_accepted(rank):
    assert stack(model(lora={"enabled": True, "maxLoraRank": rank})).models[0].lora.max_lora_rank == rank


def test_vllm_ranks_are_the_0_11_0_list():
    # vLLM v0.11.0 vllm/config/lora.py MaxLoRARanks (rank 1 came after 0.11.0).
    assert VLLM_MAX_LORA_RANKS == (8, 16, 32, 64, 128, 256, 320, 512)


@pytest.mark.parametrize("lora, where", [
    ({"adapters": [{"name": "a", "repo": "acme/a"}]}, "models.0.lora.enabled"),
    ({"enabled": True, "adapters": [{"name": "a", "repo": "acme/a"}, {"name": "a", "repo": "acme/b"}]},
     "models.0.lora.adapters.1.name"),
    ({"enabled": True, "adapters": [{"name": "../etc", "repo": "acme/a"}]}, "models.0.lora.adapters.0.name"),
    ({"enabled": True, "adapters": [{"name": "a", "repo": "not a repo"}]}, "models.0.lora.adapters.0.repo"),
], ids=["lora-off", "duplicate", "path", "repo"])
def test_bad_adapters_are_refused_at_their_key(lora, where):
    with pytest.raises(ConfigError) as caught:
        stack(model(lora=lora))
    assert where in str(caught.value)


# --- adapters of a model whose base weights are not on the Hub (s3, an existing claim) -------
# The adapters still come from the Hub (`lora.adapters[].repo`), downloaded by the server pod's
# lora-cache-init with the model's hfEndpoint and hfTokenSecret: preview checks them the same way.

S3_SOURCE = {"type": "s3", "bucket": "models", "prefix": "llama/"}
PVC_SOURCE = {"type": "pvc", "claimName": "shared-weights"}
S3_LISTING = (S3Object(key="config.json", size=10, etag="a" * 32),
              S3Object(key="model.safetensors", size=GIB, etag="b" * 32))


def no_versions(*args, **kwargs):
    raise AssertionError("no versionAt: the latest objects are listed")


def sourced_stack(source, *adapters, cache="10Gi", **fields):
    weights = {"size": "5Gi"} if source["type"] == "s3" else {}
    return stack(model("m", source=source, weights=weights,
                       lora={"enabled": True, "cacheSizeLimit": cache, "adapters": list(adapters)}, **fields))


def preview(config, hub, **kwargs):
    return preflight_stack(config, fetch=hub, env={}, list_objects=lambda *a, **k: Listing(S3_LISTING),
                           list_versions_at=no_versions, **kwargs)


@pytest.mark.parametrize("source", [S3_SOURCE, PVC_SOURCE], ids=["s3", "pvc"])
def test_adapters_of_s3_and_pvc_models_are_pinned_and_downloaded_at_the_commit(source):
    hub = Hub({"acme/sql-lora": adapter_state(SHA_B)})
    report = preview(sourced_stack(source, {"name": "sql", "repo": "acme/sql-lora"}), hub)
    assert hub.asked == [("acme/sql-lora", "main", None)]  # the base weights are not asked of the Hub
    (adapter,) = report.stack.models[0].lora.adapters
    assert adapter.revision == SHA_B
    assert report.revisions["m"]["adapters"] == {"sql": {"repo": "acme/sql-lora", "requested": "main", "commit": SHA_B}}
    init = container(compile_model(report.stack.models[0], report.stack).deployment, "lora-cache-init")
    assert init["command"][-3:] == ["sql", "acme/sql-lora", SHA_B]


@pytest.mark.parametrize("source", [S3_SOURCE, PVC_SOURCE], ids=["s3", "pvc"])
@pytest.mark.parametrize("answer, line", [
    (HubError("repo_not_found", "repo not found", 404),
     "models.0.lora.adapters.0.repo: repo 'acme/gone' not found at https://huggingface.co; check lora.adapters.0.repo"),
    (HubError("revision_not_found", "revision not found", 404),
     "models.0.lora.adapters.0.revision: revision 'main' not found in acme/gone"),
    (HubError("unreachable", "ConnectError: refused"), "models.0.lora.adapters.0: cannot reach https://huggingface.co"),
    (adapter_state(files=[HubFile("model.safetensors", 10)]),
     "models.0.lora.adapters.0.repo: acme/gone@main has no adapter_config.json"),
], ids=["repo", "revision", "unreachable", "not-an-adapter"])
def test_an_adapter_that_cannot_be_fetched_stops_the_preview_of_s3_and_pvc_models(source, answer, line):
    with pytest.raises(PreflightError) as caught:
        preview(sourced_stack(source, {"name": "sql", "repo": "acme/gone"}), Hub({"acme/gone": answer}))
    (problem,) = caught.value.problems
    assert problem.startswith(line), problem


@pytest.mark.parametrize("source", [S3_SOURCE, PVC_SOURCE], ids=["s3", "pvc"])
def test_adapters_of_s3_and_pvc_models_must_fit_the_cache_and_the_fix_names_the_cache(source):
    big = (HubFile("adapter_config.json", 1), HubFile("adapter_model.safetensors", 2 * GIB))
    with pytest.raises(PreflightError) as caught:
        preview(sourced_stack(source, {"name": "a", "repo": "acme/a"}, cache="1Gi"),
                Hub({"acme/a": adapter_state(files=big)}))
    (problem,) = caught.value.problems
    assert problem.startswith("models.0.lora.cacheSizeLimit: 1Gi (1.0 GiB) is too small for acme/a"), problem
    assert problem.endswith("set lora.cacheSizeLimit: 3Gi"), problem


def test_adapters_of_an_s3_model_are_asked_at_its_hub_endpoint_with_the_stack_token():
    config = load_stack_config({"hfToken": {"secure": "x"}, "models": [
        {"name": "m", "source": S3_SOURCE, "weights": {"size": "5Gi"},
         "lora": {"enabled": True, "adapters": [{"name": "sql", "repo": "acme/sql-lora"}]}}]})
    endpoints = []

    def hub(endpoint, repo, revision, allow, ignore, token=None):
        endpoints.append((endpoint, token))
        return adapter_state(), None
    preflight_stack(config, fetch=hub, env={"LLM_SERVING_HF_PREFLIGHT_ENDPOINT": "http://127.0.0.1:9/"}, token=None,
                    stack_token="stack-token", list_objects=lambda *a, **k: Listing(S3_LISTING))
    assert endpoints == [("http://127.0.0.1:9", "stack-token")]


def test_an_s3_model_without_adapters_asks_nothing_of_the_hub():
    def hub(*args, **kwargs):
        raise AssertionError("nothing to ask the Hub")
    config = stack(model("m", source=S3_SOURCE, weights={"size": "5Gi"}))
    assert preview(config, hub).stack.models[0].source.manifest == S3_LISTING
