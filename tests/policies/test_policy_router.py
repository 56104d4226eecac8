"""Router rules: the topology (a multi-replica router Deployment needs the backend router), the
backend router's watch target (the router's headless Service, as llm-request-router chart 0.16.2
renders it), and drain versus grace period."""

from __future__ import annotations

import pytest

from policies.rules import router
from policies.rules.base import violations
from policies.rules.kube import UNKNOWN
from tests.support.policy_helpers import Case, check_case, compliant, run


def _router(world):
    return world.one("Deployment", "router")


def _backend(world):
    return world.one("Deployment", "backend-router")


def _headless(world):
    (found,) = [m for m in world.manifests if m["kind"] == "Service" and m["metadata"]["name"].endswith("-headless")]
    return found


def _args(manifest):
    return manifest["spec"]["template"]["spec"]["containers"][0]["args"]


def _set_flag(manifest, prefix, value):
    args = _args(manifest)
    (index,) = [i for i, a in enumerate(args) if a.startswith(prefix)]
    args[index] = f"{prefix}{value}"


def _drop_port(world, name):
    spec = _headless(world)["spec"]
    spec["ports"] = [p for p in spec["ports"] if p["name"] != name]


FAIL_CASES = [
    Case(router.topology, "two replicas, backend router disabled",
         lambda w: w.remove(_backend(w)),
         "runs 2 replicas but the stack has no backend router Deployment in namespace 'llm-serving'"),
    Case(router.topology, "backend router in another namespace",
         lambda w: _backend(w)["metadata"].update(namespace="elsewhere"),
         "no backend router Deployment in namespace 'llm-serving'"),
    Case(router.topology, "replicas unset counts as 1, so 3 is checked",
         lambda w: (w.remove(_backend(w)), _router(w)["spec"].update(replicas=3.0)),
         "runs 3 replicas"),
    Case(router.backend_target, "watches the client Service (a variant of the chart did)",
         lambda w: _set_flag(_backend(w), "--target-service-name=", "llm-router"),
         "watches Service 'llm-router'"),
    Case(router.backend_target, "watches a Service that does not exist",
         lambda w: _set_flag(_backend(w), "--target-service-name=", "ghost"), "no such Service in its namespace"),
    Case(router.backend_target, "headless Service hides warming pods",
         lambda w: _headless(w)["spec"].pop("publishNotReadyAddresses"), "publishNotReadyAddresses: true"),
    Case(router.backend_target, "target Service is not headless",
         lambda w: _headless(w)["spec"].update(clusterIP="10.96.0.20"), "it is not headless (clusterIP: None)"),
    Case(router.backend_target, "quic port renamed", lambda w: _drop_port(w, "quic"), "no port quic/UDP"),
    Case(router.backend_target, "grpc port over UDP",
         lambda w: _headless(w)["spec"]["ports"][0].update(protocol="UDP"), "no port grpc/TCP"),
    Case(router.drain, "router grace period shorter than its drain",
         lambda w: _router(w)["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=30),
         "drains for 30000 ms but the pod gets 30 s to stop; set "
         "spec.template.spec.terminationGracePeriodSeconds to at least 35"),
    Case(router.drain, "backend router with the Kubernetes default grace",
         lambda w: _backend(w)["spec"]["template"]["spec"].pop("terminationGracePeriodSeconds"),
         "gets 30 s to stop"),
    Case(router.drain, "a drain longer than the rendered grace",
         lambda w: _set_flag(_router(w), "--shutdown-drain-timeout-ms=", "60000"), "at least 65"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


@pytest.mark.parametrize("rule", [router.topology, router.backend_target, router.drain], ids=lambda r: r.name)
def test_compiled_stack_passes(rule):
    assert run(rule, compliant()) == []


def test_single_replica_router_needs_no_backend_router():
    world = compliant()
    world.remove(_backend(world))
    _router(world)["spec"]["replicas"] = 1
    assert run(router.topology, world) == []
    del _router(world)["spec"]["replicas"]  # the Kubernetes default is 1
    assert run(router.topology, world) == []


def test_statefulset_router_uses_its_headless_service():
    world = compliant()
    world.remove(_backend(world))
    statefulset = _router(world)
    statefulset["kind"] = "StatefulSet"
    statefulset["spec"]["replicas"] = 3
    assert not violations(run(router.topology, world))


def test_an_unknown_target_or_drain_is_unchecked_not_a_violation():
    world = compliant()
    _backend(world)["spec"]["template"]["spec"]["containers"][0]["args"] = UNKNOWN
    _router(world)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = UNKNOWN
    for rule in (router.backend_target, router.drain):
        findings = run(rule, world)
        assert findings and not violations(findings), rule.name


def test_pods_of_other_components_are_not_drain_checked():
    world = compliant()
    server = world.server("qwen")
    server["spec"]["template"]["spec"]["containers"][0].setdefault("args", []).append(
        "--shutdown-drain-timeout-ms=999999")
    assert run(router.drain, world) == []
