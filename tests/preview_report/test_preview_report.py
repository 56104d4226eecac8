"""The preview report, a pure function over `pulumi preview --json` output.

Inputs are REAL previews captured on the simulated cluster (tests/fixtures/previews, regenerated
by capture.py there): a base stack of models `tiny` and `old` and a router pinned to StatefulSet,
then one change per fixture. `*.jsonl` is the streaming form the command runs (engine events,
with policy events); `digest-*.json` the default digest, which has no policy results.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components import cli
from components.preview_report import (
    get_path,
    image_change,
    parse,
    path_segments,
    preview_report,
    runner,
    short_revision,
    source_change,
    summarize,
)

PREVIEWS = Path(__file__).resolve().parents[1] / "fixtures" / "previews"
PASSED_ALL = "policies: ✅ 18 rules passed (llm-serving 0.1.0)"


def fixture(name: str) -> str:
    return (PREVIEWS / name).read_text()


def report(name: str) -> str:
    return preview_report(fixture(name), "capture")


def model_lines(name: str, model: str) -> list[str]:
    section = next(s for s in summarize(parse(fixture(name)), "capture").models if s.name == model)
    return section.lines


def router_lines(name: str) -> list[str]:
    sections = [s for s in summarize(parse(fixture(name)), "capture").sections if s.kind == "router"]
    return sections[0].lines if sections else []


# ---- what a reviewer reads, per change -------------------------------------------------------

def test_image_change_restarts_gpu_pods_and_keeps_the_weights():
    assert model_lines("image-change.jsonl", "tiny") == ["**GPU pods will restart** (image tag v0.11.0 → v0.11.1)"]
    text = report("image-change.jsonl")
    assert "re-downloaded" not in text
    assert "Unchanged: `old`" in text
    assert PASSED_ALL in text


def test_revision_change_redownloads_the_weights_then_moves_the_server():
    lines = model_lines("revision-change.jsonl", "tiny")
    assert lines[0].startswith("**weights will be re-downloaded** (revision main → v2)")
    assert lines[1] == "**GPU pods will restart** (onto the new weights volume)"
    assert len(lines) == 2, lines  # the gate, puller and volume collapse into one sentence


def test_args_change():
    assert model_lines("args-change.jsonl", "tiny") == ["**GPU pods will restart** (args: +`--max-model-len 4096`)"]


def test_resources_change():
    assert model_lines("resources-change.jsonl", "tiny") == [
        "**GPU pods will restart** (memory limit 4Gi → 8Gi; memory request 4Gi → 8Gi)"]


def test_metadata_only_change_restarts_nothing():
    for model in ("tiny", "old"):
        (line,) = model_lines("metadata-only.jsonl", model)
        assert line.startswith("metadata only (no pod restarts)"), line
        assert "example.com/owner" in line
    assert "will restart" not in report("metadata-only.jsonl")


def test_scale_to_zero_is_a_scale_not_a_restart():
    assert model_lines("scale-to-zero.jsonl", "tiny") == ["scale only, replicas 1 → 0: the model stops serving"]


def test_new_model():
    assert model_lines("new-model.jsonl", "extra") == [
        "**new model: downloads weights (acme/tiny-llm@main), then serves**"]
    # The router learns the new model through its environment: its pods restart.
    assert router_lines("new-model.jsonl") == ["**router pods will restart** (env ROUTER_MODELS)"]
    assert "Unchanged: `old`, `tiny`" in report("new-model.jsonl")


def test_model_removed():
    assert model_lines("model-removed.jsonl", "old") == ["**model removed: volume, puller and server deleted**"]


def test_router_kind_change_is_a_delete_and_create():
    lines = router_lines("router-kind-change.jsonl")
    assert lines[0].startswith(
        "**router workload kind changes (StatefulSet → Deployment): delete + create (downtime)**")
    assert "Service `router-headless-service` deleted" in lines
    text = report("router-kind-change.jsonl")
    assert "GPU pods" not in text  # the models do not move


def test_no_change():
    text = report("no-change.jsonl")
    assert "**no changes** · preview succeeded" in text
    assert "Unchanged: `tiny`, `old`" in text
    assert "### Router" not in text


def test_digest_form_reads_steps_but_says_it_has_no_policy_results():
    lines = model_lines("digest-image-and-revision.json", "tiny")
    assert lines[0].startswith("**weights will be re-downloaded** (revision main → v2)")
    assert lines[1] == "**GPU pods will restart** (image tag v0.11.0 → v0.11.1; onto the new weights volume)"
    text = report("digest-image-and-revision.json")
    assert "policies: not in this JSON" in text
    assert "PULUMI_ENABLE_STREAMING_JSON_PREVIEW=1" in text


def test_digest_of_a_failed_policy_run_says_failed_without_naming_rules():
    preview = parse(fixture("digest-policy-violation.json"))
    assert preview.form == "digest" and preview.violations == [] and preview.failed_run
    text = report("digest-policy-violation.json")
    assert "❌ preview failed" in text
    assert "the failure may be a mandatory violation" in text


# ---- policies ----------------------------------------------------------------------------

def test_policy_violations_name_rule_level_resource_and_fix():
    preview = parse(fixture("policy-violation.jsonl"))
    assert preview.form == "stream" and preview.result == "failed" and preview.failed_run
    found = {(v.rule, v.level, v.urn.rsplit("::", 1)[-1]) for v in preview.violations}
    assert found == {
        ("llm-serving-pod-engine-identity", "mandatory", name) for name in
        ("tiny-server", "tiny-puller", "old-server", "old-puller")
    } | {("llm-serving-stack-server-weights-gate", "advisory", name) for name in ("tiny-server", "old-server")}
    text = report("policy-violation.jsonl")
    assert "policies: ❌ 4 mandatory violation(s), 2 advisory (llm-serving 0.1.0)" in text
    assert "- **mandatory** `llm-serving-pod-engine-identity` — fix: set runAsUser/runAsGroup" in text
    assert "  - `tiny-server`: Deployment 'tiny': spec.template.spec.containers[0] (server) has runAsUser 2000; " \
           "vllm server pods must use 1234" in text
    assert "- **advisory** `llm-serving-stack-server-weights-gate`" in text
    assert "Mandatory violations fail `pulumi preview` and block `pulumi up`." in text
    # The change itself is still reported.
    assert "**GPU pods will restart** (image tag v0.11.0 → v0.11.1)" in text
    assert "16 rules passed" in text


def test_the_fix_on_its_own_line_is_read_too():
    # Pack 0.2 puts the fix in pulumi-policy's remediation_steps and ends each violation message
    # with a `Fix:` line (the description no longer carries it): the report reads both forms.
    old = ("unreadable. Fix: set runAsUser/runAsGroup (and fsGroup, if set) to the engine's pair from stack config "
           "platform.vllmUid/vllmGid or nimUid/nimGid, and label the workload `llm-serving.dev/engine: vllm|nim`.\\n"
           "Job 'tiny-pull-eb8f7fb9': spec.template.spec.containers[0] (puller) has runAsUser 2000; "
           "vllm weights-puller pods must use 1234\\n")
    new = ("unreadable.\\nJob 'tiny-pull-eb8f7fb9': spec.template.spec.containers[0] (puller) has runAsUser 2000; "
           "vllm weights-puller pods must use 1234\\nFix: Set runAsUser/runAsGroup to the pair.\\n\", \"severity\": \"high")
    text = _rewrite("policy-violation.jsonl", old, new)
    (puller,) = [v for v in parse(text).violations if v.urn.endswith("::tiny-puller")]
    assert puller.fix == "Set runAsUser/runAsGroup to the pair." and puller.severity == "high"
    assert "- **mandatory** `llm-serving-pod-engine-identity` (severity high) — fix: Set runAsUser/runAsGroup to the pair." \
        in preview_report(text, "s")
    assert puller.finding == ("Job 'tiny-pull-eb8f7fb9': spec.template.spec.containers[0] (puller) has runAsUser 2000; "
                              "vllm weights-puller pods must use 1234")


def test_passing_pack_lists_every_rule_once():
    preview = parse(fixture("image-change.jsonl"))
    assert preview.violations == [] and not preview.failed_run
    assert len(preview.passed) == 18 and preview.failed == set()
    assert all(rule.startswith("llm-serving-") for rule in preview.passed)
    assert preview.packs == {"llm-serving": "0.1.0"}


def test_a_preview_stopped_by_an_error_shows_it_and_does_not_claim_no_changes():
    text = report("router-kind-unacknowledged.jsonl")
    assert "router.workload.kind: the router is deployed as a StatefulSet" in text
    assert "the preview stopped early: the plan below is incomplete" in text
    assert "no changes" not in text
    assert "Resource monitor has terminated" not in text


# ---- variations of the captured previews (values the simulated cluster cannot produce) -----

def _rewrite(name: str, old: str, new: str) -> str:
    text = fixture(name)
    assert old in text
    return text.replace(old, new)


def test_commit_revisions_are_shortened():
    a, b = "a1b2c3d4e5f6" + "0" * 28, "c3d4e5f6a7b8" + "1" * 28
    text = _rewrite("revision-change.jsonl", "acme/tiny-llm@main", f"acme/tiny-llm@{a}")
    text = text.replace("acme/tiny-llm@v2", f"acme/tiny-llm@{b}")
    lines = summarize(parse(text), "s").models
    tiny = next(s for s in lines if s.name == "tiny")
    assert tiny.lines[0].startswith("**weights will be re-downloaded** (revision a1b2c3d4e5f6 → c3d4e5f6a7b8)")


def test_a_repo_change_names_both_sources():
    text = _rewrite("revision-change.jsonl", "acme/tiny-llm@v2", "acme/other-llm@v2")
    tiny = next(s for s in summarize(parse(text), "s").models if s.name == "tiny")
    assert "(source acme/tiny-llm@main → acme/other-llm@v2)" in tiny.lines[0]


def test_events_as_a_json_array_are_accepted():
    events = [json.loads(line) for line in fixture("image-change.jsonl").splitlines() if line.strip()]
    assert preview_report(json.dumps(events), "capture") == report("image-change.jsonl")


def test_garbage_is_refused_with_the_line():
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        parse('{"summaryEvent": {}}\nnot json\n')
    with pytest.raises(ValueError, match="empty"):
        parse("  \n")


# ---- helpers -----------------------------------------------------------------------------

def test_property_paths():
    assert path_segments('spec.template.spec.containers[0].env[4].value') == [
        "spec", "template", "spec", "containers", 0, "env", 4, "value"]
    assert path_segments('metadata.annotations["llm-serving.dev/model-source"]') == [
        "metadata", "annotations", "llm-serving.dev/model-source"]
    assert get_path({"a": [{"b": 1}]}, "a[0].b") == 1
    assert get_path({"a": []}, "a[3].b") is None


@pytest.mark.parametrize("old,new,expected", [
    ("docker.io/vllm/vllm-openai:v0.11.0", "docker.io/vllm/vllm-openai:v0.11.1", "image tag v0.11.0 → v0.11.1"),
    ("localhost:5000/vllm:1", "localhost:5000/vllm:2", "image tag 1 → 2"),
    ("docker.io/vllm/vllm-openai:v0.11.0", "ghcr.io/acme/vllm:v0.11.0",
     "image docker.io/vllm/vllm-openai:v0.11.0 → ghcr.io/acme/vllm:v0.11.0"),
    ("a/b:1", "a/b:1", ""),
])
def test_image_change_words(old, new, expected):
    assert image_change(old, new) == expected


def test_source_change_words():
    assert source_change("r@main", "r@v2") == "revision main → v2"
    assert source_change("r@main", "r@main") == ""
    assert short_revision("0e9e39f249a16976918f6564b8830bc894c89659") == "0e9e39f249a1"
    assert short_revision("main") == "main"


# ---- the command, on saved JSON ------------------------------------------------------------

def test_cli_writes_the_report_and_exits_0(tmp_path):
    out = tmp_path / "report.md"
    code = cli.main(["preview-report", "--stack", "capture", "--json-in",
                     str(PREVIEWS / "image-change.jsonl"), "--out", str(out)])
    assert code == 0
    assert out.read_text() == report("image-change.jsonl")


def test_cli_exits_4_when_the_preview_failed(tmp_path, capsys):
    code = cli.main(["preview-report", "--stack", "capture", "--json-in", str(PREVIEWS / "policy-violation.jsonl")])
    assert code == 4
    assert "`llm-serving-pod-engine-identity`" in capsys.readouterr().out


def test_cli_exits_1_on_unreadable_input(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("")
    assert cli.main(["preview-report", "--stack", "s", "--json-in", str(bad)]) == 1
    assert "empty" in capsys.readouterr().err


def test_nim_operator_path_hand_written_events():
    """Not capturable here (the simulated cluster has no NIM operator CRDs): the operator path's
    NIMCache (named after the cache spec, so a change replaces it) and NIMService."""
    model = "urn:pulumi:s::llm-serving::llm-serving:index:NimModel::nim"
    def event(op, kind, name, old, new, diff=None, keys=None):
        api = "apps.nvidia.com/v1alpha1"
        return json.dumps({"resourcePreEvent": {"metadata": {
            "op": op, "urn": f"urn:pulumi:s::llm-serving::llm-serving:index:NimModel$kubernetes:{api}:{kind}::{name}",
            "type": f"kubernetes:{api}:{kind}", "old": {"inputs": old, "parent": model},
            "new": {"inputs": new, "parent": model}, "detailedDiff": diff, "keys": keys}}})

    def src(rev):
        return {"metadata": {"annotations": {"llm-serving.dev/model-source": f"meta/llama@{rev}"}}}

    def image(tag):
        return {"spec": {"image": {"repository": "nvcr.io/nim/meta/llama", "tag": tag}}}

    text = "\n".join([
        event("replace", "NIMCache", "nim-nim-cache", src("main"), src("v2"), keys=["metadata.name"]),
        event("update", "NIMService", "nim-nim-service", image("1.8.4"), image("1.8.5"),
              diff={"spec.image.tag": {"diffKind": "update"}}),
    ])
    (section,) = summarize(parse(text), "s").models
    assert section.detail == "NIM"
    assert section.lines[0].startswith("**weights will be re-downloaded** (revision main → v2)")
    assert section.lines[1] == "**GPU pods will restart** (image tag 1.8.4 → 1.8.5)"


# ---- the preview it runs ------------------------------------------------------------------

def test_previews_run_without_per_step_checkpoints_and_streaming(monkeypatch):
    """The CI preview skips the engine's per-step snapshot (thrown away in a preview, quadratic
    in resources), unless the caller's environment says otherwise."""
    import subprocess


    seen = []

    def fake_run(command, **kwargs):
        seen.append(kwargs["env"])
        return subprocess.CompletedProcess(command, 0, '{"type": "summaryEvent"}\n', "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    runner.run_preview("local", env={"PATH": "/bin"})
    assert runner.preview_command("local")[-2:] == ["--parallel", "64"]
    assert seen[-1]["PULUMI_SKIP_CHECKPOINTS"] == "true"
    assert seen[-1]["PULUMI_ENABLE_STREAMING_JSON_PREVIEW"] == "1"
    assert seen[-1]["PATH"] == "/bin"
    runner.run_preview("local", env={"PULUMI_SKIP_CHECKPOINTS": "false"})
    assert seen[-1]["PULUMI_SKIP_CHECKPOINTS"] == "false"


def test_a_multi_node_models_template_change_restarts_its_groups():
    # A LeaderWorkerSet (multiNode) keeps its pods under spec.leaderWorkerTemplate.
    from components.preview_report.changes import server_lines
    from components.preview_report.parsing import Resource, Step

    urn = "urn:pulumi:capture::llm-serving::llm-serving:index:VllmModel$kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet::big-server"
    path = ["spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0, "args"]
    old = {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"args": ["/model-store"]}]}}}}}
    new = {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [
        {"args": ["/model-store", "--max-model-len", "4096"]}]}}}}}
    step = Step("update", urn, "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", old=old, new=new,
                diff=(".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in path).replace(".[", "["),))
    lines = server_lines(Resource(urn, step.type, "big-server", [step]), "GPU pods", "server LeaderWorkerSet")
    assert lines == ["**GPU pods will restart** (args: +`--max-model-len 4096`)"], lines


def test_a_per_pod_multi_node_models_new_source_is_said_on_its_leader_worker_set():
    # multiNode.weights: perPod: no volume, Job or gate to replace; the LWS's pods pull the new source.
    from components.preview_report.parsing import Resource, Step
    from components.preview_report.summary import _model_section

    urn = "urn:pulumi:capture::llm-serving::llm-serving:index:VllmModel$kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet::big-server"
    kind = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"

    def inputs(ref: str, per_pod: bool = True) -> dict:
        lwt = {"volumeClaimTemplates": [{"metadata": {"name": "weights"}}]} if per_pod else {}
        return {"metadata": {"annotations": {"llm-serving.dev/model-source": ref}}, "spec": {"leaderWorkerTemplate": lwt}}

    def lines(old: dict, new: dict) -> list[str]:
        step = Step("update", urn, kind, old=old, new=new, diff=("metadata.annotations",))
        return _model_section("big", "llm-serving:index:VllmModel", [Resource(urn, kind, "big-server", [step])]).lines

    said = lines(inputs("acme/big@v1"), inputs("acme/big@v2"))
    assert ("**weights will be re-downloaded into every pod's own volume** (revision v1 → v2): one group at a "
            "time is down while its pods pull and verify them; the other groups keep serving") in said, said
    assert not any("own volume" in line for line in lines(inputs("acme/big@v1", False), inputs("acme/big@v2", False)))
    assert not any("own volume" in line for line in lines(inputs("acme/big@v1"), inputs("acme/big@v1")))


def _scaled_object_event(op, old_min, new_min, cooldown=600):
    """A vLLM model's KEDA ScaledObject (not capturable here: the simulated cluster's stacks run no
    KEDA), from minReplicaCount ``old_min`` to ``new_min``."""
    model = "urn:pulumi:s::llm-serving::llm-serving:index:VllmModel::tiny"
    kind, api = "ScaledObject", "keda.sh/v1alpha1"

    def spec(minimum):
        if minimum is None:
            return {}
        return {"spec": {"minReplicaCount": minimum, **({"cooldownPeriod": cooldown} if minimum == 0 else {})}}

    return json.dumps({"resourcePreEvent": {"metadata": {
        "op": op, "urn": f"urn:pulumi:s::llm-serving::llm-serving:index:VllmModel$kubernetes:{api}:{kind}::tiny-scaled-object",
        "type": f"kubernetes:{api}:{kind}", "old": {"inputs": spec(old_min), "parent": model},
        "new": {"inputs": spec(new_min), "parent": model},
        "detailedDiff": {"spec.minReplicaCount": {"diffKind": "update"}}}}})


@pytest.mark.parametrize("op, old_min, new_min, line", [
    ("update", 1, 0, "**may sleep**: scaled to zero after 600s without requests; the first request after a sleep is "
                     "held at the gateway while a pod starts and loads the weights"),
    ("create", None, 0, "**may sleep**: scaled to zero after 600s without requests"),
    ("update", 0, 2, "**no longer sleeps**: keeps at least 2 replica(s)"),
    ("delete", 0, None, "**no longer sleeps**: not autoscaled"),
], ids=["starts-sleeping", "autoscaled-to-zero-from-the-start", "floor-raised", "autoscaling-off"])
def test_the_report_says_which_models_may_sleep(op, old_min, new_min, line):
    (section,) = summarize(parse(_scaled_object_event(op, old_min, new_min)), "s").models
    assert len(section.lines) == 1 and section.lines[0].startswith(line), section.lines


def test_a_scaled_object_change_that_keeps_the_floor_is_reported_as_before():
    (section,) = summarize(parse(_scaled_object_event("update", 1, 2)), "s").models
    assert section.lines == ["ScaledObject `tiny-scaled-object` updated: `spec.minReplicaCount`"]


def _event(op: str, role: str, kind: str = "Deployment", api: str = "apps/v1", old=None, new=None) -> str:
    """A step of model tiny's child ``tiny-<role>`` (its next revision's, with a next- role)."""
    model = "urn:pulumi:s::llm-serving::llm-serving:index:VllmModel::tiny"
    token = f"kubernetes:{api if '/' in api else 'core/' + api}:{kind}"
    return json.dumps({"resourcePreEvent": {"metadata": {
        "op": op, "urn": f"urn:pulumi:s::llm-serving::llm-serving:index:VllmModel${token}::tiny-{role}",
        "type": token, "old": {"inputs": old or {}, "parent": model}, "new": {"inputs": new or {}, "parent": model},
        "detailedDiff": {"spec": {"diffKind": "update"}} if op == "update" else {}}}})


def _server(revision: str) -> dict:
    return {"spec": {"template": {"metadata": {"annotations": {"llm-serving.dev/model-source": f"acme/tiny@{revision}"}},
                                  "spec": {"containers": [{"name": "server", "image": "r.io/vllm:1"}]}}}}


def test_the_report_says_when_a_next_revision_is_added_promoted_or_rolled_back():
    def said(*events: str) -> list[str]:
        (section,) = summarize(parse("\n".join(events)), "s").models
        return section.lines

    # The revision's weights are named as the model's (by their source): with it, not a re-download of the model's.
    added = said(_event("create", "next-server", new=_server("v2")),
                 _event("create", "weights-9c761cf8", "PersistentVolumeClaim", "v1"),
                 _event("create", "puller-9c761cf8", "Job", "batch/v1"))
    assert len(added) == 1 and added[0].startswith("**next revision `tiny-next` added**"), added
    rolled_back = said(_event("delete", "next-server", old=_server("v2")), _event("delete", "next-service", "Service", "v1"),
                       _event("delete", "weights-9c761cf8", "PersistentVolumeClaim", "v1"))
    assert rolled_back == ["**next revision `tiny-next` removed**: its objects are deleted; the serving revision is "
                           "untouched"], rolled_back
    # Promote: the model keeps the revision's weights (no step for them) and its own go.
    promoted = said(_event("delete", "next-server", old=_server("v2")),
                    _event("update", "server", old=_server("v1"), new=_server("v2")),
                    _event("delete", "weights-feb38b94", "PersistentVolumeClaim", "v1"))
    assert len(promoted) == 2 and promoted[0].startswith(
        "**next revision `tiny-next` removed**: its objects are deleted; the model's server changes with it (a "
        "promote: it rolls to the new settings onto the revision's verified weights (no re-download"), promoted
    assert not any("re-downloaded" in line for line in promoted), promoted


def test_a_new_source_of_weights_named_after_their_source_reads_as_a_re_download_with_the_change():
    # Weights children are `<model>-weights-<hash>` since the release of 2026-12-03: a new source
    # is a create of the new ones and a delete of the old (a stack deployed before shows a replace).
    def pvc(revision: str) -> dict:
        return {"metadata": {"annotations": {"llm-serving.dev/model-source": f"acme/tiny@{revision}"}}}

    (section,) = summarize(parse("\n".join([
        _event("create", "weights-9c761cf8", "PersistentVolumeClaim", "v1", new=pvc("v2")),
        _event("delete", "weights-feb38b94", "PersistentVolumeClaim", "v1", old=pvc("v1")),
        _event("update", "server", old=_server("v1"), new=_server("v2"))])), "s").models
    assert section.lines[0] == ("**weights will be re-downloaded** (revision v1 → v2): a new volume and puller "
                                "download them, the server moves over once they are complete, then the old volume "
                                "is deleted"), section.lines
