"""Preflight decisions as pure functions over hub answers (issue 8), the config that drives them,
and what they change in the compiled manifests. No network: hub answers are values here; the
real client against a loopback server is tested in tests/puller."""

from __future__ import annotations

import pytest

from components.compile import weights
from components.compile.common import MODEL_SOURCE_ANNOTATION
from components.config import ConfigError, load_stack_config
from components.config.sources import DEFAULT_IGNORE_PATTERNS
from components.preflight import (
    ENDPOINT_ENV,
    Check,
    HubError,
    HubFile,
    PreflightError,
    RepoState,
    decide,
    preflight_stack,
)
from components.preflight.decide import recommended_size, selected
from tests.support.builders import REPO, compile_model, model, nim_model, stack

SHA_A = "a" * 40
SHA_B = "b" * 40
GIB = 2**30
HUB = "https://huggingface.co"

FILES = (
    HubFile("config.json", 700), HubFile("tokenizer.json", 9_000_000), HubFile("tokenizer_config.json", 50_000),
    HubFile("model-00001-of-00002.safetensors", 5 * GIB), HubFile("model-00002-of-00002.safetensors", 3 * GIB),
    HubFile("original/consolidated.00.pth", 8 * GIB), HubFile("original/params.json", 200),
    HubFile("pytorch_model.bin", 8 * GIB), HubFile("README.md", 5_000),
)
SELECTED_BYTES = 700 + 9_000_000 + 50_000 + 8 * GIB + 5_000  # what the default patterns keep


def check(**overrides) -> Check:
    fields = dict(repo="org/model", revision="main", endpoint=HUB, volume_size="20Gi",
                  ignore_patterns=DEFAULT_IGNORE_PATTERNS)
    fields.update(overrides)
    return Check(**fields)


def state(commit: str = SHA_A, files=FILES, **flags) -> RepoState:
    return RepoState(commit, tuple(files), **flags)


def only_error(verdict):
    assert len(verdict.errors) == 1, verdict.errors
    return verdict.errors[0]


# -- the table ----------------------------------------------------------------------------------

def test_pinned_branch_downloads_its_commit():
    verdict = decide(check(), state())
    assert (verdict.revision, verdict.commit, verdict.pinned, verdict.errors) == (SHA_A, SHA_A, True, ())
    assert f"org/model@main pinned to commit {SHA_A}" in verdict.notes


def test_moved_branch_pins_the_new_commit():
    before, after = decide(check(), state(SHA_A)), decide(check(), state(SHA_B))
    assert (before.revision, after.revision) == (SHA_A, SHA_B)


def test_a_commit_in_config_stays_and_is_still_checked():
    verdict = decide(check(revision=SHA_A, volume_size="1Gi"), state(SHA_A))
    assert verdict.revision == SHA_A and not any("pinned" in n for n in verdict.notes)
    assert only_error(verdict).field == "weights.size"


def test_pin_false_keeps_the_branch_and_says_where_it_is():
    verdict = decide(check(pin=False), state(SHA_A))
    assert (verdict.revision, verdict.pinned, verdict.errors) == ("main", False, ())
    assert any("not pinned" in n and SHA_A in n for n in verdict.notes)


@pytest.mark.parametrize("kind, status, secret, field, detail", [
    ("unauthorized", 401, None, "source.repo", "HTTP 401"),
    ("unauthorized", 401, "hf-token/token", "hfTokenSecret", "HTTP 401"),
    ("forbidden", 403, None, "source.repo", "HTTP 403"),
    ("forbidden", 403, "hf-token/token", "hfTokenSecret", "HTTP 403"),
])
def test_gated_or_private_names_the_repo_and_the_fix(kind, status, secret, field, detail):
    for verdict in (decide(check(token_secret=secret), HubError(kind, "x", status)),          # metadata refused
                    decide(check(token_secret=secret), state(), HubError(kind, "x", status))):  # file refused
        problem = only_error(verdict)
        assert problem.field == field
        assert problem.message.startswith("token lacks access to org/model; request access or fix the secret")
        assert detail in problem.message
        assert ("Secret hf-token/token" in problem.message) == bool(secret)


def test_missing_repo():
    problem = only_error(decide(check(), HubError("repo_not_found", "repository not found", 404)))
    assert problem.field == "source.repo"
    assert "repo 'org/model' not found at https://huggingface.co" in problem.message


def test_missing_revision_names_the_revision():
    problem = only_error(decide(check(revision="v9"), HubError("revision_not_found", "revision not found", 404)))
    assert problem.field == "source.revision"
    assert "revision 'v9' not found in org/model" in problem.message


def test_too_large_gives_both_numbers_and_the_size_to_set():
    problem = only_error(decide(check(volume_size="8Gi"), state()))
    assert problem.field == "weights.size"
    assert problem.message.startswith("8Gi (8.0 GiB) is too small for org/model")
    assert "total 8.0 GiB" in problem.message and "8.8 GiB with 10% headroom" in problem.message
    assert problem.message.endswith("set weights.size: 9Gi")


def test_size_counts_only_what_the_patterns_download():
    verdict = decide(check(volume_size="9Gi"), state())
    assert verdict.errors == () and verdict.download_bytes == SELECTED_BYTES
    everything = decide(check(volume_size="9Gi", ignore_patterns=()), state())
    assert only_error(everything).message.endswith("set weights.size: 27Gi")


def test_headroom_is_configurable():
    assert decide(check(volume_size="9Gi", headroom_percent=0), state()).errors == ()
    assert only_error(decide(check(volume_size="9Gi", headroom_percent=20), state())).field == "weights.size"


@pytest.mark.parametrize("policy", ["fail", "warn"])
def test_unreachable_fails_with_the_reason_or_warns_and_proceeds_unpinned(policy):
    verdict = decide(check(on_unreachable=policy), HubError("unreachable", "ConnectError: connection refused"))
    assert verdict.revision == "main" and not verdict.pinned
    if policy == "fail":
        problem = only_error(verdict)
        assert "cannot reach https://huggingface.co to check org/model@main: ConnectError" in problem.message
        assert "onUnreachable: warn" in problem.message
    else:
        assert verdict.errors == ()
        (warning,) = verdict.warnings
        assert "unpinned and unchecked" in warning and "re-pulls" in warning


def test_unreachable_while_reading_a_file_follows_the_same_policy():
    verdict = decide(check(), state(), HubError("unreachable", "HTTP 503", 503))
    assert "cannot reach" in only_error(verdict).message


def test_patterns_that_leave_no_weights_are_an_error():
    bin_only = [HubFile("config.json", 1), HubFile("pytorch_model.bin", 10)]
    problem = only_error(decide(check(), state(files=bin_only)))
    assert problem.field == "source.ignorePatterns" and "pytorch_model.bin" in problem.message


def test_safetensors_and_bin_together_warn():
    verdict = decide(check(volume_size="30Gi", ignore_patterns=("original/*",)), state())
    assert any("*.safetensors and *.bin" in w and "8.0 GiB of .bin" in w for w in verdict.warnings)


def test_unknown_sizes_skip_the_size_check_with_a_warning():
    verdict = decide(check(volume_size="1Gi"), state(files=[HubFile("config.json", None), HubFile("m.safetensors", None)]))
    assert verdict.errors == () and verdict.download_bytes is None
    assert any("size check skipped" in w for w in verdict.warnings)


def test_selection_follows_huggingface_hub_glob_semantics():
    files = [HubFile(p, 1) for p in ("a.json", "sub/b.json", "original/c.json", "original/d.pth", "x.bin")]
    assert [f.path for f in selected(files, None, ("original/",))] == ["a.json", "sub/b.json", "x.bin"]
    assert [f.path for f in selected(files, ("*.json",), ("original/*",))] == ["a.json", "sub/b.json"]


@pytest.mark.parametrize("download, headroom, size", [(0, 10, "1Gi"), (GIB, 0, "1Gi"), (GIB, 10, "2Gi"), (15 * GIB, 10, "17Gi")])
def test_recommended_size(download, headroom, size):
    assert recommended_size(download, headroom) == size


# -- config --------------------------------------------------------------------------------------

def test_pin_defaults_to_the_platform_and_a_model_overrides_it():
    config = stack(model("a"), model("b", pin=True), pin=False)
    assert (config.platform.pin, config.models[0].pin, config.models[1].pin) == (False, None, True)


@pytest.mark.parametrize("source, fragment", [
    ({"allowPatterns": []}, "empty allow list"),
    ({"ignorePatterns": [" *.bin"]}, "is not a file glob"),
    ({"allowPatterns": ["--all"]}, "is not a file glob"),
])
def test_bad_patterns_are_refused(source, fragment):
    with pytest.raises(ConfigError) as caught:
        stack(model(source={"repo": REPO, **source}))
    assert fragment in str(caught.value)


def test_preflight_endpoint_may_be_loopback_but_the_puller_endpoint_may_not():
    config = stack(model(), preflight={"endpoint": "http://127.0.0.1:8080/", "onUnreachable": "warn"})
    assert config.platform.preflight.endpoint == "http://127.0.0.1:8080"
    with pytest.raises(ConfigError, match="loopback"):
        stack(model(), hfEndpoint="http://127.0.0.1:8080")
    with pytest.raises(ConfigError, match="not an http"):
        stack(model(), preflight={"endpoint": "ftp://mirror"})
    with pytest.raises(ConfigError, match="onUnreachable"):
        stack(model(), preflight={"onUnreachable": "ignore"})


# -- compiled puller -----------------------------------------------------------------------------

def test_puller_passes_every_pattern_after_one_flag():
    # The image's `hf` (huggingface_hub 0.35.x) keeps only the last of a repeated flag; the run
    # against that very CLI is tests/puller/test_puller.py::test_layout_is_what_the_server_reads.
    config = stack(model(source={"repo": REPO, "allowPatterns": ["*.safetensors", "*.json"],
                                 "ignorePatterns": ["original/*"]}))
    assert weights.puller_args(config.models[0]) == [
        "download", REPO, "--revision", "main", "--local-dir", "/model-store",
        "--include", "*.safetensors", "*.json", "--exclude", "original/*",
    ]
    default = weights.puller_args(stack(model()).models[0])
    assert default[6:] == ["--exclude", *DEFAULT_IGNORE_PATTERNS]
    no_skip = weights.puller_args(stack(model(source={"repo": REPO, "ignorePatterns": []})).models[0])
    assert "--exclude" not in no_skip and "--include" not in no_skip


def test_puller_env_never_phones_home_and_keeps_the_volume_for_weights():
    config = stack(model())
    env = {e["name"]: e.get("value") for e in weights.puller_env(config.models[0], config.platform)}
    assert env["HF_HUB_DISABLE_UPDATE_CHECK"] == "1"
    assert env["HF_XET_CHUNK_CACHE_SIZE_BYTES"] == "0"
    assert "HF_XET_HIGH_PERFORMANCE" not in env  # memory-hungry; the puller is limited to 4Gi


# -- the stack -----------------------------------------------------------------------------------

class FakeHub:
    """``fetch`` stand-in: answers by repo, records which endpoint was asked."""

    def __init__(self, answers: dict):
        self.answers, self.asked = answers, []

    def __call__(self, endpoint, repo, revision, allow, ignore, token=None):
        self.asked.append((endpoint, repo, revision))
        self.tokens = [*getattr(self, "tokens", []), (repo, token)]
        answer = self.answers[repo]
        return answer if isinstance(answer, tuple) else (answer, None)


def small(commit=SHA_A):
    return state(commit, files=[HubFile("config.json", 10), HubFile("model.safetensors", GIB)])


def test_moved_upstream_replaces_the_weights_and_shows_old_and_new_commit():
    config = stack(model("m", weights={"size": "5Gi"}))
    deployed = {}
    for commit in (SHA_A, SHA_B):
        report = preflight_stack(config, fetch=FakeHub({REPO: small(commit)}), env={})
        deployed[commit] = compile_model(report.stack.models[0], report.stack)
        assert report.revisions == {"m": {"repo": REPO, "requested": "main", "commit": commit}}
    old, new = deployed[SHA_A], deployed[SHA_B]
    assert weights.puller_args(new.model)[3] == SHA_B
    assert old.names.weights != new.names.weights and old.puller_job["metadata"]["name"] != new.puller_job["metadata"]["name"]  # re-pull
    assert old.names.server == new.names.server                                            # same server
    assert old.weights_pvc["metadata"]["annotations"][MODEL_SOURCE_ANNOTATION] == f"{REPO}@{SHA_A}"
    assert new.weights_pvc["metadata"]["annotations"][MODEL_SOURCE_ANNOTATION] == f"{REPO}@{SHA_B}"


def test_unpinned_stack_keeps_its_names_when_upstream_moves():
    config = stack(model("m", weights={"size": "5Gi"}), pin=False)
    names = {preflight_stack(config, fetch=FakeHub({REPO: small(c)}), env={}).stack.models[0].source.revision
             for c in (SHA_A, SHA_B)}
    assert names == {"main"}


def test_every_problem_is_reported_at_its_model_and_field():
    config = stack(model("a", weights={"size": "1Gi"}), model("b", source={"repo": "org/gone"}))
    fake = FakeHub({REPO: state(files=[HubFile("model.safetensors", 2 * GIB)]),
                    "org/gone": HubError("repo_not_found", "repository not found", 404)})
    with pytest.raises(PreflightError) as caught:
        preflight_stack(config, fetch=fake, env={})
    lines = caught.value.problems
    assert lines[0].startswith("models.0.weights.size: 1Gi (1.0 GiB) is too small")
    assert lines[1].startswith("models.1.source.repo: repo 'org/gone' not found")
    assert "nothing was created" in str(caught.value)


def test_endpoint_precedence_env_then_config_then_the_models_endpoint():
    mirror = "https://hf-mirror.mirrors.svc:8080"
    config = stack(model(hfEndpoint=mirror))
    for env, expected in (({}, mirror), ({ENDPOINT_ENV: "http://127.0.0.1:9/"}, "http://127.0.0.1:9")):
        fake = FakeHub({REPO: small()})
        preflight_stack(config, fetch=fake, env=env)
        assert fake.asked[0][0] == expected
    configured = stack(model(hfEndpoint=mirror), preflight={"endpoint": "http://127.0.0.1:7"})
    fake = FakeHub({REPO: small()})
    preflight_stack(configured, fetch=fake, env={})
    assert fake.asked[0][0] == "http://127.0.0.1:7"


def test_nim_operator_models_are_not_asked():
    operator = nim_model("op", path="operator", nim={"authSecret": "ngc"})
    fake = FakeHub({REPO: small()})
    report = preflight_stack(stack(operator, model("v", weights={"size": "5Gi"})), fetch=fake, env={})
    assert [name for name in report.revisions] == ["v"] and len(fake.asked) == 1
    assert report.stack.models[0].source.revision == "main"


def test_models_reading_the_stack_token_are_checked_with_it():
    """The puller of a model without its own hfTokenSecret reads the Secret made from the stack's
    `llm-serving:hfToken`: preflight asks the hub with that token, not the preview machine's."""
    config = load_stack_config({
        "hfToken": {"secure": "(held by the Pulumi engine)"},
        "models": [model("uses-stack", source={"repo": "org/a"}, weights={"size": "5Gi"}),
                   model("own-secret", source={"repo": "org/b"}, weights={"size": "5Gi"},
                         hfTokenSecret={"name": "team-token", "key": "token"})],
    })
    fake = FakeHub({"org/a": small(), "org/b": small()})
    preflight_stack(config, fetch=fake, env={}, token="machine", stack_token="from-stack")
    assert fake.tokens == [("org/a", "from-stack"), ("org/b", "machine")]
    fake = FakeHub({"org/a": small(), "org/b": small()})
    preflight_stack(config, fetch=fake, env={}, token="machine")  # no stack token: the machine's
    assert fake.tokens == [("org/a", "machine"), ("org/b", "machine")]


def test_a_refused_stack_token_says_which_setting_to_fix():
    verdict = decide(check(token_secret="llm-serving-hf-token/token", token_from_stack=True),
                     state(), HubError("forbidden", "x", 403))
    problem = only_error(verdict)
    assert problem.field == "hfTokenSecret"
    assert "made from the stack's llm-serving:hfToken, which preflight used" in problem.message
    assert "pulumi config set --secret llm-serving:hfToken" in problem.message
    assert "this machine's token" not in problem.message


def test_a_volume_that_must_hold_two_revisions_is_sized_for_both():
    # multiNode.weights: perPod pulls the next revision beside the serving one (docs/multi-node.md).
    assert decide(check(volume_size="9Gi"), state()).errors == ()
    problem = only_error(decide(check(volume_size="9Gi", revisions_held=2), state()))
    assert problem.field == "weights.size"
    assert "for 2 revisions" in problem.message and "multiNode.weights: perPod" in problem.message
    assert problem.message.endswith("set weights.size: 18Gi")


def test_per_pod_multi_node_weights_are_checked_for_two_revisions():
    from components.preflight.stack import check_for

    per_pod = stack(model("big", gpus=4, tensorParallelSize=4, multiNode={"nodes": 2, "weights": "perPod"},
                          weights={"size": "40Gi"}))
    shared = stack(model("big", gpus=4, tensorParallelSize=4, multiNode={"nodes": 2},
                         weights={"size": "40Gi", "accessMode": "ReadWriteMany"}))
    assert check_for(per_pod.models[0], per_pod, env={}).revisions_held == 2
    assert check_for(shared.models[0], shared, env={}).revisions_held == 1
