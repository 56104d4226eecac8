"""Router rules, following the llm-request-router chart 0.16.2 render: a multi-replica router
Deployment needs the backend router (a StatefulSet router can use its headless Service's DNS);
the backend router must watch a Service it can read router pods from; router pods must outlive
their drain.

Convention: the router workload is labelled `app.kubernetes.io/component: router`, the backend
router's Deployment `app.kubernetes.io/component: backend-router`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

from .base import resource_rule, stack_rule
from .kube import (
    BACKEND_ROUTER,
    COMPONENT_LABEL,
    ROUTER,
    UNKNOWN,
    Finding,
    K8sObject,
    Stack,
    as_list,
    get,
    labelled,
    number,
    pod_containers,
    unchecked,
    unknowns,
    violation,
)


@stack_rule(
    "llm-serving-router-topology",
    "A router Deployment (app.kubernetes.io/component: router) with more than one replica needs a "
    "backend router Deployment (app.kubernetes.io/component: backend-router) in its namespace: "
    "pylons cannot reach every replica otherwise.",
    fix="Enable the backend router, or run one replica, or use workload kind StatefulSet (DNS "
    "discovery through its headless Service).",
    severity="high",
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


# The backend router (stargate-k8s-router) reads the router pods from the EndpointSlices of the
# Service named by --target-service-name, looking its ports up by name (llm-request-router chart
# 0.16.2, devilkun/nvcf@e07119fa templates/backend-router.yaml; scripts/check-multi-replica-render.sh
# asserts the headless Service publishes not-ready addresses). Anything else leaves it with no
# targets, and every pylon with no router: a failure no pod status shows.
TARGET_FLAG = "--target-service-name="
TARGET_PORTS = {"grpc": "TCP", "quic": "UDP"}


def _flag(container: Any, prefix: str) -> Any:
    """The value of ``prefix<value>`` among the container's args; None when absent, ``UNKNOWN``
    when the args (or one of them) are not known yet."""
    args = as_list(get(container, "args"))
    if args is UNKNOWN:
        return UNKNOWN
    unknown = False
    for arg in args:
        if isinstance(arg, str) and arg.startswith(prefix):
            return arg[len(prefix):]
        unknown = unknown or arg is UNKNOWN
    return UNKNOWN if unknown else None


def _target_problem(service: Optional[K8sObject]) -> Any:
    """What makes ``service`` unusable as the backend router's target; None when it is fine,
    ``UNKNOWN`` when a field that decides it is not known yet (preview)."""
    if service is None:
        return "no such Service in its namespace"
    spec = get(service.props, "spec", default={})
    cluster_ip, publish = get(spec, "clusterIP"), get(spec, "publishNotReadyAddresses")
    ports = as_list(get(spec, "ports"))
    if cluster_ip is UNKNOWN or publish is UNKNOWN or ports is UNKNOWN:
        return UNKNOWN
    found = {}
    for port in ports:
        name, protocol = get(port, "name"), get(port, "protocol", default="TCP")
        if name is UNKNOWN or protocol is UNKNOWN:
            return UNKNOWN
        found[name] = protocol
    problems = []
    if cluster_ip != "None":
        problems.append("it is not headless (clusterIP: None)")
    if publish is not True:
        problems.append("it hides warming pods (publishNotReadyAddresses: true)")
    missing = [f"{name}/{protocol}" for name, protocol in TARGET_PORTS.items() if found.get(name) != protocol]
    if missing:
        problems.append(f"it has no port {' or '.join(missing)}")
    return "; ".join(problems) or None


@stack_rule(
    "llm-serving-router-backend-target",
    "A backend router (app.kubernetes.io/component: backend-router) watches the Service its "
    "--target-service-name names: that Service must exist in its namespace, be headless "
    "(clusterIP: None), publish not-ready addresses and have ports named grpc (TCP) and quic "
    "(UDP), or the backend router finds no router pods and no model can register.",
    fix="Point --target-service-name at the router's headless Service, as the router component "
    "renders it.",
    severity="high",
)
def backend_target(stack: Stack, config: dict) -> Iterator[Finding]:
    services: dict = {}
    backends = []
    undecided = False  # a Service whose name or namespace is not known yet could be the target
    for resource, obj in stack.k8s_objects():
        if obj.kind == "Service":
            namespace, name = obj.namespace, get(obj.props, "metadata", "name")
            if namespace is UNKNOWN or name is UNKNOWN:
                undecided = True
            else:
                services[(namespace, name)] = obj
        elif obj.kind == "Deployment":
            component, findings = labelled(obj, COMPONENT_LABEL, "component")
            yield from (Finding(f.message, resource.urn, True) for f in findings)
            if component == BACKEND_ROUTER:
                backends.append((resource, obj))
    for resource, obj in backends:
        refs, _, unknown_paths = pod_containers(obj)
        yield from unknowns(obj, unknown_paths, resource.urn)
        for ref in refs:
            target = _flag(ref.container, TARGET_FLAG)
            if target is UNKNOWN or obj.namespace is UNKNOWN:
                yield unchecked(f"{obj.display}: {ref.path}.args", resource.urn)
            elif isinstance(target, str):
                service = services.get((obj.namespace, target))
                problem = _target_problem(service)
                if problem is UNKNOWN or (service is None and undecided):
                    yield unchecked(f"{obj.display}: the Service '{target}' it watches", resource.urn)
                elif problem:
                    yield violation(f"{obj.display} watches Service '{target}' ({ref.path}), but {problem}; "
                                    "point --target-service-name at the router's headless Service",
                                    resource.urn)


DRAIN_FLAG = "--shutdown-drain-timeout-ms="
DEFAULT_GRACE_SECONDS = 30  # Kubernetes' default terminationGracePeriodSeconds


@resource_rule(
    "llm-serving-router-drain",
    "Router and backend-router pods (app.kubernetes.io/component: router or backend-router) that "
    "drain for --shutdown-drain-timeout-ms must get a terminationGracePeriodSeconds longer than "
    "the drain, or the kubelet kills them mid-drain and cuts every open stream.",
    ("Deployment", "StatefulSet"),
    fix="Set terminationGracePeriodSeconds to the drain in whole seconds plus a margin (the chart: "
    "ceil(ms / 1000) + 5), as the router component renders it.",
    severity="medium", url="https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination",
)
def drain(obj: K8sObject, config: dict) -> Iterator[Finding]:
    component, findings = labelled(obj, COMPONENT_LABEL, "component")
    yield from findings
    if component not in (ROUTER, BACKEND_ROUTER):
        return
    spec_path, spec = obj.pod_spec()
    refs, _, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    grace = number(get(spec, "terminationGracePeriodSeconds", default=DEFAULT_GRACE_SECONDS))
    for ref in refs:
        value = _flag(ref.container, DRAIN_FLAG)
        if value is None:
            continue
        if value is UNKNOWN or grace is UNKNOWN:
            yield unchecked(f"{obj.display}: {spec_path}.terminationGracePeriodSeconds against {ref.path}")
        elif not value.isdigit() or not isinstance(grace, (int, float)):
            yield violation(f"{obj.display}: {ref.path} drains for '{value}' ms, not a number of milliseconds")
        elif grace * 1000 <= int(value):
            yield violation(f"{obj.display}: {ref.path} drains for {value} ms but the pod gets "
                            f"{grace} s to stop; set {spec_path}.terminationGracePeriodSeconds to at least "
                            f"{-(-int(value) // 1000) + 5}")
