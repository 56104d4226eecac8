"""Router topology: a multi-replica router Deployment needs the backend router."""

from __future__ import annotations

import pytest
from policy_helpers import Case, check_case, compliant, run

from policies.rules import router
from policies.rules.base import violations


def _router(world):
    return world.one("Deployment", "router")


FAIL_CASES = [
    Case(router.topology, "two replicas, backend router disabled",
         lambda w: w.remove(w.one("Deployment", "backend-router")),
         "runs 2 replicas but the stack has no backend router Deployment in namespace 'llm-serving'"),
    Case(router.topology, "backend router in another namespace",
         lambda w: w.one("Deployment", "backend-router")["metadata"].update(namespace="elsewhere"),
         "no backend router Deployment in namespace 'llm-serving'"),
    Case(router.topology, "replicas unset counts as 1, so 3 is checked",
         lambda w: (w.remove(w.one("Deployment", "backend-router")), _router(w)["spec"].update(replicas=3.0)),
         "runs 3 replicas"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


def test_compiled_stack_passes():
    assert run(router.topology, compliant()) == []


def test_single_replica_router_needs_no_backend_router():
    world = compliant()
    world.remove(world.one("Deployment", "backend-router"))
    _router(world)["spec"]["replicas"] = 1
    assert run(router.topology, world) == []
    del _router(world)["spec"]["replicas"]  # the Kubernetes default is 1
    assert run(router.topology, world) == []


def test_statefulset_router_uses_per_pod_dns():
    world = compliant()
    world.remove(world.one("Deployment", "backend-router"))
    statefulset = _router(world)
    statefulset["kind"] = "StatefulSet"
    statefulset["spec"]["replicas"] = 3
    assert not violations(run(router.topology, world))
