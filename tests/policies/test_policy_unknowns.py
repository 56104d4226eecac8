"""Values unknown during preview: no rule raises, and an unknown never passes as compliant
when it could hide a violation (it is reported as "cannot be checked until apply")."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from policies.rules import ALL_RULES, cpu, gpu, images, pods, rbac, router, stack
from policies.rules.base import violations
from policies.rules.kube import UNKNOWN, K8sObject
from tests.support.policy_helpers import compliant, container, messages, run


def paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path into a manifest (dict keys and list indexes), parents before children.
    apiVersion and kind are never unknown: the engine sends them as the type token."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not prefix and key in ("apiVersion", "kind"):
                continue
            yield (*prefix, key)
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from paths(item, (*prefix, index))


def with_unknown(manifest: dict, path: tuple) -> dict:
    mutated = copy.deepcopy(manifest)
    target = mutated
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = UNKNOWN
    return mutated


RESOURCE_RULES = [r for r in ALL_RULES if r.scope == "resource"]
STACK_RULES = [r for r in ALL_RULES if r.scope == "stack"]


def test_no_resource_rule_raises_on_any_single_unknown_value():
    checked = 0
    for manifest in compliant().manifests:
        for path in paths(manifest):
            obj = K8sObject.from_manifest(with_unknown(manifest, path))
            for rule in RESOURCE_RULES:
                rule(obj)  # must not raise
                checked += 1
    assert checked > 5000


def test_whole_objects_unknown():
    for manifest in compliant().manifests:
        for key in [k for k in manifest if k not in ("apiVersion", "kind")]:
            obj = K8sObject.from_manifest({**manifest, key: UNKNOWN})
            for rule in RESOURCE_RULES:
                assert not violations(rule(obj)), (rule.name, manifest["kind"], key)


def _unknown_only(findings):
    assert findings and not violations(findings), messages(findings)
    assert all("cannot be checked until apply" in f.message for f in findings)


@pytest.mark.parametrize("rule, mutate", [
    (pods.engine_identity, lambda w: container(w.server("qwen"), "server")["securityContext"].update(runAsUser=UNKNOWN)),
    (pods.run_as_non_root, lambda w: container(w.server("qwen"), "server")["securityContext"].update(runAsNonRoot=UNKNOWN)),
    (pods.no_privilege_escalation, lambda w: w.server("qwen")["spec"]["template"]["spec"].update(containers=UNKNOWN)),
    (pods.puller_server_identity_match, lambda w: w.puller("qwen")["spec"]["template"].update(spec=UNKNOWN)),
    (images.pinned, lambda w: container(w.server("qwen"), "server").update(image=UNKNOWN)),
    (images.fully_qualified, lambda w: w.one("NIMService")["spec"]["image"].update(tag=UNKNOWN)),
    (gpu.shm_size_limit, lambda w: w.server("qwen")["spec"]["template"]["spec"].update(volumes=UNKNOWN)),
    (gpu.gpu_limits, lambda w: container(w.server("qwen"), "server")["resources"]["limits"].update({"nvidia.com/gpu": UNKNOWN})),
    (cpu.cpu_server_settings, lambda w: container(w.server("qwen-cpu"), "server")["resources"]["limits"].update(cpu=UNKNOWN)),
    (cpu.cpu_server_settings, lambda w: container(w.server("qwen-cpu"), "server")["env"][2].update(value=UNKNOWN)),
    (rbac.no_wildcards, lambda w: w.one("Role", "teardown").update(rules=UNKNOWN)),
    (rbac.no_cluster_admin, lambda w: w.one("RoleBinding", "backend-router")["roleRef"].update(name=UNKNOWN)),
    (rbac.teardown_verbs, lambda w: w.one("Role", "teardown")["rules"][0].update(verbs=UNKNOWN)),
    (rbac.backend_router_scope, lambda w: w.one("Role", "backend-router")["metadata"]["labels"].update(
        {"app.kubernetes.io/component": UNKNOWN})),
    (router.topology, lambda w: w.one("Deployment", "router")["spec"].update(replicas=UNKNOWN)),
    (router.topology, lambda w: [labels.update({"app.kubernetes.io/component": UNKNOWN}) for labels in (
        w.one("Deployment", "backend-router")["metadata"]["labels"],
        w.one("Deployment", "backend-router")["spec"]["template"]["metadata"]["labels"])]),
    (stack.server_weights_gate, lambda w: [labels.update({"llm-serving.dev/model": UNKNOWN}) for labels in (
        w.server("qwen")["metadata"]["labels"], w.server("qwen")["spec"]["template"]["metadata"]["labels"])]),
], ids=lambda v: getattr(v, "name", ""))
def test_unknown_is_reported_as_unchecked_not_as_pass(rule, mutate):
    world = compliant()
    mutate(world)
    _unknown_only(run(rule, world))


def test_unknown_elsewhere_does_not_hide_a_real_violation():
    world = compliant()
    server = container(world.server("qwen"), "server")
    server["securityContext"].update(runAsGroup=UNKNOWN, runAsUser=1000)
    found = run(pods.engine_identity, world)
    assert "has runAsUser 1000" in messages(violations(found))
    assert any(f.unknown for f in found)


def test_an_unknown_never_turns_a_compliant_object_into_a_violation():
    """Replacing any one compliant value by an unknown may make a check wait for apply; it must
    never report a violation that the real value might not have."""
    wrong = []
    for manifest in compliant().manifests:
        for path in paths(manifest):
            obj = K8sObject.from_manifest(with_unknown(manifest, path))
            for rule in RESOURCE_RULES:
                if violations(rule(obj)):
                    wrong.append((rule.name, manifest["kind"], manifest["metadata"]["name"], path))
    assert wrong == []


@pytest.mark.parametrize("rule", STACK_RULES, ids=lambda r: r.name)
def test_an_unknown_never_turns_a_compliant_stack_into_a_violation(rule):
    """Every single value of every object unknown in turn, in the resource graph of the compliant
    stack (a rule that raises fails here too). The graph is built before the value is replaced, as
    the engine's is: an unknown `metadata` hides a Deployment's name, not its URN or its gate."""
    world = compliant()
    baseline = world.stack()
    wrong = []
    for manifest in world.manifests:
        target = [r for r in baseline.resources if r.props is manifest][0]
        for path in paths(manifest):
            mutated = with_unknown(manifest, path)
            graph = type(baseline)(tuple(
                type(r)(r.type, r.name, r.urn, mutated, r.dependencies, r.provider_props) if r is target else r
                for r in baseline.resources))
            if violations(rule(graph)):
                wrong.append((manifest["kind"], manifest["metadata"]["name"], path))
    assert wrong == []
