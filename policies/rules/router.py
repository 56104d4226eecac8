"""Router topology: a multi-replica router Deployment discovers its peers through the backend
router, so one must exist (a StatefulSet router uses per-pod DNS instead).

Convention: the router workload is labelled `app.kubernetes.io/component: router`, the backend
router's Deployment `app.kubernetes.io/component: backend-router`.
"""

from __future__ import annotations

from typing import Iterator

from .base import stack_rule
from .kube import (
    BACKEND_ROUTER, COMPONENT_LABEL, ROUTER, UNKNOWN, Finding, Stack, get, labelled, number,
    unchecked, violation,
)


@stack_rule(
    "llm-serving-router-topology",
    "A router Deployment (app.kubernetes.io/component: router) with more than one replica needs "
    "a backend router Deployment (app.kubernetes.io/component: backend-router) in its namespace: "
    "replicas cannot discover each other otherwise. Fix: enable the backend router, or run one "
    "replica, or use workload kind StatefulSet (stable per-pod DNS discovery).",
)
def topology(stack: Stack, config: dict) -> Iterator[Finding]:
    routers, backends, undecided = [], [], []
    for resource, obj in stack.k8s_objects():
        if obj.kind != "Deployment":
            continue
        component, findings = labelled(obj, COMPONENT_LABEL, "component")
        if findings:
            undecided.append(obj)  # could be a backend router (or a router) once known
            yield from (Finding(f.message, resource.urn, True) for f in findings)
        if component == ROUTER:
            routers.append((resource, obj))
        elif component == BACKEND_ROUTER:
            backends.append(obj)
    for resource, obj in routers:
        replicas = number(get(obj.props, "spec", "replicas", default=1))
        if replicas is UNKNOWN:
            yield unchecked(f"{obj.display}: spec.replicas", resource.urn)
            continue
        if not isinstance(replicas, (int, float)) or replicas <= 1:
            continue
        namespace = obj.namespace
        peers = [b for b in backends
                 if namespace is UNKNOWN or b.namespace is UNKNOWN or b.namespace == namespace]
        if not peers and undecided:
            yield unchecked(f"{obj.display}: whether the stack has a backend router", resource.urn)
        elif not peers:
            where = f" in namespace '{namespace}'" if isinstance(namespace, str) else ""
            yield violation(f"{obj.display} runs {replicas} replicas but the stack has no backend "
                            f"router Deployment{where}; enable the backend router or set replicas: 1",
                            resource.urn)
