"""Pod identity and isolation rules: pass on the compiled stack, fail on one mutation each."""

from __future__ import annotations

import pytest

from policies.rules import pods
from policies.rules.base import violations
from policies.rules.kube import K8sObject
from tests.support.policy_helpers import DELETE, Case, check_case, compliant, container, messages, pod, put, run


def _server_uid(world, uid):
    put(container(world.server("qwen"), "server"), "securityContext.runAsUser", uid)


def _unset_identity(world):
    put(pod(world.server("qwen")), "securityContext.runAsUser", DELETE)
    put(container(world.server("qwen"), "server"), "securityContext.runAsUser", DELETE)


def _relabel(world, model, engine, uid, gid):
    """Give one object another engine's label and identity: consistent per object, so only the
    puller/server comparison can catch it."""
    job = world.puller(model)
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        labels["llm-serving.dev/engine"] = engine
    for ctx in (pod(job)["securityContext"], container(job, "puller")["securityContext"]):
        ctx.update(runAsUser=uid, runAsGroup=gid)
    pod(job)["securityContext"]["fsGroup"] = gid


FAIL_CASES = [
    Case(pods.engine_identity, "vllm server runs as the NIM uid", lambda w: _server_uid(w, 1000),
         "has runAsUser 1000; vllm server pods must use 2000"),
    Case(pods.engine_identity, "vllm puller gid 2000",
         lambda w: put(container(w.puller("qwen"), "puller"), "securityContext.runAsGroup", 2000),
         "has runAsGroup 2000; vllm weights-puller pods must use 0"),
    Case(pods.engine_identity, "NIM server runs as the vLLM uid",
         lambda w: put(container(w.server("nim-llama"), "server"), "securityContext.runAsUser", 2000),
         "nim server pods must use 1000"),
    Case(pods.engine_identity, "runAsUser unset (image default)", _unset_identity,
         "sets no runAsUser"),
    Case(pods.engine_identity, "puller fsGroup differs from gid",
         lambda w: put(pod(w.puller("qwen")), "securityContext.fsGroup", 1000), "fsGroup 1000 differs"),
    Case(pods.engine_identity, "server without engine label",
         lambda w: [labels.pop("llm-serving.dev/engine") for labels in (
             w.server("qwen")["metadata"]["labels"], w.server("qwen")["spec"]["template"]["metadata"]["labels"])],
         "without the label llm-serving.dev/engine"),
    Case(pods.engine_identity, "engine generic",
         lambda w: w.server("qwen")["metadata"]["labels"].update({"llm-serving.dev/engine": "generic"}),
         "engine 'generic' is not supported"),
    Case(pods.engine_identity, "NIMService userID is the vLLM uid",
         lambda w: put(w.one("NIMService"), "spec.userID", 2000), "spec.userID is 2000"),
    Case(pods.engine_identity, "pack config moves the vLLM uid",
         lambda w: None, "vllm server pods must use 3000", config={"vllmUid": 3000.0}),
    Case(pods.puller_server_identity_match, "puller relabelled nim with NIM identity",
         lambda w: _relabel(w, "qwen", "nim", 1000, 2000),
         "model 'qwen': its puller and server pods run as different identities"),
    Case(pods.puller_server_identity_match, "server uid drifts",
         lambda w: _server_uid(w, 2001), "uid/gid 2001/0"),
    Case(pods.puller_server_identity_match, "puller without model label",
         lambda w: [labels.pop("llm-serving.dev/model") for labels in (
             w.puller("qwen")["metadata"]["labels"], w.puller("qwen")["spec"]["template"]["metadata"]["labels"])],
         "without the label llm-serving.dev/model"),
    Case(pods.run_as_non_root, "container runAsNonRoot false",
         lambda w: put(container(w.server("qwen"), "server"), "securityContext.runAsNonRoot", False),
         "does not set runAsNonRoot: true"),
    Case(pods.run_as_non_root, "runAsNonRoot unset everywhere",
         lambda w: [put(ctx, "runAsNonRoot", DELETE) for ctx in (
             pod(w.one("Deployment", "router"))["securityContext"],
             container(w.one("Deployment", "router"))["securityContext"])],
         "Deployment 'llm-router': spec.template.spec.containers[0]"),
    Case(pods.run_as_non_root, "runs as uid 0",
         lambda w: put(container(w.puller("qwen"), "puller"), "securityContext.runAsUser", 0), "runs as uid 0"),
    Case(pods.no_privilege_escalation, "allowPrivilegeEscalation true",
         lambda w: put(container(w.server("llama"), "lora-cache-init"), "securityContext.allowPrivilegeEscalation", True),
         "lora-cache-init) allowPrivilegeEscalation is True"),
    Case(pods.no_privilege_escalation, "a multi-node model's worker escalates",
         lambda w: put(pod(w.get("LeaderWorkerSet", "llama-405b-lws"))["containers"][0],
                       "securityContext.allowPrivilegeEscalation", True),
         "LeaderWorkerSet 'llama-405b-lws': spec.leaderWorkerTemplate.workerTemplate.spec.containers[0] (server) "
         "allowPrivilegeEscalation is True"),
    Case(pods.run_as_non_root, "a multi-node model's leader runs as root",
         lambda w: put(pod(w.get("LeaderWorkerSet", "llama-405b-lws"), "leader")["containers"][0],
                       "securityContext.runAsUser", 0),
         "spec.leaderWorkerTemplate.leaderTemplate.spec.containers[0] (server) runs as uid 0"),
    Case(pods.no_privilege_escalation, "allowPrivilegeEscalation unset",
         lambda w: put(container(w.puller("qwen"), "puller"), "securityContext.allowPrivilegeEscalation", DELETE),
         "unset, which allows it"),
    Case(pods.no_privileged, "privileged init container",
         lambda w: put(container(w.server("llama"), "lora-cache-init"), "securityContext.privileged", True),
         "lora-cache-init) is privileged"),
    Case(pods.no_host_path, "hostPath volume",
         lambda w: pod(w.server("qwen"))["volumes"].append({"name": "models", "hostPath": {"path": "/models"}}),
         "volume models is a hostPath"),
    Case(pods.no_host_path, "NIMService hostPath storage",
         lambda w: put(w.one("NIMService"), "spec.storage.hostPath", "/models"),
         "spec.storage.hostPath is set"),
    Case(pods.service_links_disabled, "server pod template with service links unset",
         lambda w: put(pod(w.server("qwen")), "enableServiceLinks", DELETE),
         "spec.template.spec.enableServiceLinks is unset (Kubernetes defaults it to true)"),
    Case(pods.service_links_disabled, "puller pod template with service links on",
         lambda w: put(pod(w.puller("qwen")), "enableServiceLinks", True),
         "enableServiceLinks is True"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


@pytest.mark.parametrize("rule", [pods.engine_identity, pods.puller_server_identity_match, pods.run_as_non_root,
                                  pods.no_privilege_escalation, pods.no_privileged, pods.no_host_path,
                                  pods.service_links_disabled],
                         ids=lambda r: r.name)
def test_compiled_stack_passes(rule):
    assert run(rule, compliant()) == []


def test_identity_follows_pack_config():
    world = compliant()
    # Moving NIM's identity in the pack config makes NIM objects fail and vLLM ones still pass.
    found = violations(run(pods.engine_identity, world, {"nimUid": 1001, "nimGid": 2001}))
    assert found and all("nim" in f.message or "NIM" in f.message for f in found)
    assert not violations(run(pods.engine_identity, world, {"vllmUid": 2000, "vllmGid": 0}))


def test_container_level_identity_overrides_pod_level():
    world = compliant()
    deployment = world.server("qwen")
    put(pod(deployment), "securityContext.runAsUser", 1234)  # pod level wrong...
    assert not violations(pods.engine_identity(K8sObject.from_manifest(deployment)))  # ...container wins
    put(container(deployment, "server"), "securityContext.runAsUser", DELETE)
    assert "has runAsUser 1234" in messages(pods.engine_identity(K8sObject.from_manifest(deployment)))


@pytest.mark.parametrize("name, exempt", [("pylon", True), ("metrics-agent", False)])
def test_only_the_routers_worker_sidecar_keeps_its_own_identity(name, exempt):
    world = compliant()
    deployment = world.server("qwen")
    pod(deployment)["containers"].append({
        "name": name, "image": "nvcr.io/nvidia/stargate-client:0.4.0",
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True,
                            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    })
    found = messages(pods.engine_identity(K8sObject.from_manifest(deployment)))
    assert (found == "") is exempt, found
    assert bool(violations(run(pods.puller_server_identity_match, world))) is not exempt


def test_nim_operator_default_identity_counts_when_unset():
    world = compliant()
    nim = world.one("NIMService")
    del nim["spec"]["userID"], nim["spec"]["groupID"]
    obj = K8sObject.from_manifest(nim)
    assert pods.engine_identity(obj) == []  # operator defaults 1000/2000 = the NIM identity
    assert "unset (the operator runs it as 1000)" in messages(pods.engine_identity(obj, {"nimUid": 1500}))


def test_objects_that_are_not_server_or_puller_are_not_identity_checked():
    world = compliant()
    router = K8sObject.from_manifest(world.one("Deployment", "router"))
    assert pods.engine_identity(router) == []
    # ...but every pod must still be non-root.
    put(container(world.one("Deployment", "router")), "securityContext.runAsUser", 0)
    assert violations(pods.run_as_non_root(K8sObject.from_manifest(world.one("Deployment", "router"))))
