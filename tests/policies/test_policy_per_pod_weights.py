"""Per-pod weights (multiNode.weights: perPod): the weights-gate rule accepts a LeaderWorkerSet whose
pods fill and check their own volumes in init containers, with no gate or Job in the stack, and
refuses one whose server could start on a volume nobody filled or verified. Every pack rule also
passes over the compiled per-pod stack (init containers included)."""

from __future__ import annotations

import copy

import pytest

from policies.rules import ALL_RULES, stack
from policies.rules.base import violations
from tests.support.policy_helpers import STACK, World, compiled_manifests, messages, pod, run, stack_secret_manifests

PER_POD = {"name": "llama-405b", "source": {"type": "s3", "endpoint": "http://minio.storage.svc:9000", "bucket": "models",
                                            "prefix": "llama-405b/", "credentials": {"secret": "models-reader"}},
           "gpus": 8, "tensorParallelSize": 8, "resources": {"memory": "512Gi"}, "replicas": 2,
           "weights": {"size": "1Ti", "storageClassName": "local-nvme"}, "multiNode": {"nodes": 2, "weights": "perPod"}}


def per_pod_world() -> World:
    raw = copy.deepcopy(STACK)
    raw["models"] = [PER_POD if m["name"] == "llama-405b" else m for m in raw["models"]]
    world = World(compiled_manifests(raw) + stack_secret_manifests(raw))
    world.removed.add("llama-405b-weights-gate")  # per-pod: the program declares none
    return world


def lws(world: World) -> dict:
    return world.get("LeaderWorkerSet", "llama-405b-lws")


def test_a_per_pod_lws_needs_no_gate_or_job_and_every_rule_passes():
    world = per_pod_world()
    kinds = {(m["kind"], m["metadata"]["labels"].get("llm-serving.dev/model")) for m in world.manifests
             if "labels" in m["metadata"]}
    assert ("Job", "llama-405b") not in kinds and ("PersistentVolumeClaim", "llama-405b") not in kinds
    for rule in ALL_RULES:
        assert violations(run(rule, world)) == [], rule.name


def _drop_init(world: World, role: str, name: str) -> None:
    spec = pod(lws(world), role)
    spec["initContainers"] = [c for c in spec["initContainers"] if c["name"] != name]


def _server_mount(world: World, role: str) -> dict:
    (mount,) = [m for m in pod(lws(world), role)["containers"][0]["volumeMounts"] if m["name"] == "weights"]
    return mount


@pytest.mark.parametrize("mutate, expect", [
    (lambda w: _drop_init(w, "worker", "weights-pull"),
     "LeaderWorkerSet 'llama-405b-lws' workerTemplate: its per-pod weights volume has no 'weights-pull' init container"),
    (lambda w: pod(lws(w), "leader").pop("initContainers"),
     "LeaderWorkerSet 'llama-405b-lws' leaderTemplate: its per-pod weights volume has no 'weights-pull'"),
    (lambda w: _server_mount(w, "leader").pop("subPath"),
     "mounts the per-pod weights volume (subPath None, readOnly True) other than the directory 'weights-pull' filled"),
    (lambda w: _server_mount(w, "worker").update(subPath="0badc0de"),
     "workerTemplate: spec.leaderWorkerTemplate.workerTemplate.spec.containers[0] (server) mounts the per-pod weights volume"),
    (lambda w: _server_mount(w, "worker").pop("readOnly"), "or writably; mount exactly that subPath, read-only"),
    (lambda w: [m for m in pod(lws(w), "leader")["initContainers"][1]["volumeMounts"] if m["name"] == "weights"][0]
     .update(subPath="elsewhere"), "'weights-verify' checks another directory than 'weights-pull' filled"),
], ids=["no-pull-worker", "no-init-leader", "server-whole-volume", "server-other-dir", "server-writable", "verify-elsewhere"])
def test_a_per_pod_server_that_could_start_unverified_is_refused(mutate, expect):
    world = per_pod_world()
    mutate(world)
    found = violations(run(stack.server_weights_gate, world))
    assert found and expect in messages(found), messages(found)


def test_a_shared_lws_still_needs_its_gate():
    world = per_pod_world()
    spec = lws(world)["spec"]["leaderWorkerTemplate"]
    spec.pop("volumeClaimTemplates")  # no longer per pod, and no gate in the stack
    found = violations(run(stack.server_weights_gate, world))
    assert "the stack has no WeightsGate for model 'llama-405b'" in messages(found)
