"""The policy pack on a streamed model (source.load: stream, issue 23 item 5): its server has no
weights volume, puller or gate, and every rule accepts what the compiler emits for it; the gate
rule exempts exactly a server that streams (an s3:// model with --load-format runai_streamer and
no PersistentVolumeClaim), read from its pod spec, and nothing that only looks like one."""

from __future__ import annotations

import copy

import pytest

from policies.rules import ALL_RULES, stack
from tests.support.policy_helpers import World, compiled_manifests, messages, run, stack_secret_manifests

SOURCE = {"type": "s3", "load": "stream", "bucket": "models", "prefix": "llama/",
          "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "s3-keys"}}
RAW = {
    "platform": {"sharedMemorySizeLimit": "1Gi", "networkPolicy": {"enabled": True, "allowFrom": [
        {"namespaceSelector": {"kubernetes.io/metadata.name": "apps"}}]}},
    "models": [
        {"name": "streamed", "source": SOURCE, "replicas": 2},
        {"name": "irsa", "source": {"type": "s3", "load": "stream", "bucket": "models", "prefix": "qwen/",
                                    "serviceAccountName": "models-reader"}},
        {"name": "copied", "source": {**SOURCE, "load": "copy"}},
    ],
}


def world(rendering: bool = False) -> World:
    # The program declares no gate for a streamed model: the world has none either.
    found = World(compiled_manifests(RAW) + ([] if rendering else stack_secret_manifests(RAW)), rendering=rendering)
    if not rendering:
        found.removed.update({"streamed-weights-gate", "irsa-weights-gate"})
    return found


def test_a_streamed_model_compiles_to_no_puller():
    manifests = compiled_manifests(RAW)
    pullers = {m["metadata"]["labels"]["llm-serving.dev/model"] for m in manifests if m["kind"] == "Job"}
    assert pullers == {"copied"}


def test_every_object_rule_passes_on_streamed_models():
    findings = [f for rule in ALL_RULES if rule.scope != "stack" for f in run(rule, world())]
    assert not findings, messages(findings)


@pytest.mark.parametrize("rendering", [False, True], ids=["cluster", "rendering"])
def test_the_gate_rule_exempts_a_streamed_server(rendering):
    assert run(stack.server_weights_gate, world(rendering)) == []


def _as_copied_look_alike(w: World, mutate) -> World:
    server = w.server("streamed")
    mutate(server["spec"]["template"]["spec"])
    return w


@pytest.mark.parametrize("mutate, what", [
    # Mounting a claim: there are weights of ours, and they must be gated.
    (lambda spec: spec["volumes"].append({"name": "weights", "persistentVolumeClaim": {"claimName": "w"}}), "a claim"),
    # Another loader reads a local path: not a stream.
    (lambda spec: spec["containers"][0]["args"].__setitem__(2, "safetensors"), "another loader"),
    (lambda spec: spec["containers"][0]["args"].__setitem__(0, "/model-store"), "a local model path"),
], ids=["claim", "loader", "path"])
def test_only_a_real_stream_is_exempt(mutate, what):
    w = _as_copied_look_alike(world(), mutate)
    found = run(stack.server_weights_gate, w)
    assert [f.message for f in found] == [
        "Deployment 'streamed': the stack has no WeightsGate for model 'streamed' ('streamed-weights-gate'); "
        "declare the gate and make the Deployment depend on it"], what


def test_load_format_is_read_as_vllm_reads_it():
    assert stack.load_format(["s3://b/p/", "--load-format=runai_streamer"]) == "runai_streamer"
    assert stack.load_format(["s3://b/p/", "--load_format", "runai_streamer"]) == "runai_streamer"
    assert stack.load_format(["s3://b/p/", "--load-format"]) is None
    assert stack.load_format(copy.deepcopy(["/model-store"])) is None
