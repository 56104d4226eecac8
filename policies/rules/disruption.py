"""Disruption and drain of model servers (app.kubernetes.io/component: server Deployments), as the
compilers render them (components/compile/disruption.py):

- the pod's grace period outlasts every container's preStop wait (else the kubelet kills the
  server mid-drain and cuts the streams the wait was for);
- a server that runs several replicas prefers one pod per node (topology spread on
  kubernetes.io/hostname over its own pods), so a node loss never takes every replica;
- a server that runs several replicas has a PodDisruptionBudget over its pods, and no budget over
  server pods leaves zero voluntary disruptions (minAvailable >= replicas or maxUnavailable 0
  blocks every node drain forever).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import resource_rule, stack_rule
from .kube import (
    COMPONENT_LABEL,
    SERVER,
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

DEFAULT_GRACE_SECONDS = 30  # Kubernetes' default terminationGracePeriodSeconds
HOSTNAME_KEY = "kubernetes.io/hostname"


def _server(obj: K8sObject) -> tuple[bool, list[Finding]]:
    component, findings = labelled(obj, COMPONENT_LABEL, "component")
    return component == SERVER, findings


# A server Deployment without spec.replicas: the compiler leaves the count out only for an
# autoscaled model, whose ScaledObject owns it up to maxReplicas (the policy does not see that
# maximum), so such a server is held to the rules of several replicas.
AUTOSCALED = "autoscaled"


def replicas(obj: K8sObject) -> Any:
    """spec.replicas as a number, UNKNOWN, or AUTOSCALED when the Deployment leaves it out."""
    value = get(obj.props, "spec", "replicas")
    return AUTOSCALED if value is None else number(value)


def _several(count: Any) -> bool:
    if count == AUTOSCALED:
        return True
    return isinstance(count, (int, float)) and not isinstance(count, bool) and count > 1


def _count_text(count: Any) -> str:
    return "a replica count left to an autoscaler" if count == AUTOSCALED else f"{count:g} replicas"


def _pre_stop_seconds(container: Any) -> Any:
    """The container's preStop wait in seconds (sleep action); None when it has none."""
    pre_stop = get(container, "lifecycle", "preStop")
    if pre_stop is UNKNOWN:
        return UNKNOWN
    return None if pre_stop is None else number(get(pre_stop, "sleep", "seconds"))


@resource_rule(
    "llm-serving-server-drain-grace",
    "A model server pod's terminationGracePeriodSeconds is longer than every container's preStop "
    "wait: the grace period counts from the start of the hooks, so a shorter one has the kubelet "
    "kill the server mid-drain and cut the streams the wait was for.",
    ("Deployment",),
    fix="Set terminationGracePeriodSeconds to the wait plus a margin for the shutdown (the compiler: "
    "platform.disruption.drainSeconds + 15), or lower the wait.",
    severity="medium", url="https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination",
)
def drain_grace(obj: K8sObject, config: dict) -> Iterator[Finding]:
    is_server, findings = _server(obj)
    yield from findings
    if not is_server:
        return
    spec_path, spec = obj.pod_spec()
    refs, _, unknown_paths = pod_containers(obj)
    yield from unknowns(obj, unknown_paths)
    grace = number(get(spec, "terminationGracePeriodSeconds", default=DEFAULT_GRACE_SECONDS))
    for ref in refs:
        wait = _pre_stop_seconds(ref.container)
        if wait is None:
            continue
        if wait is UNKNOWN or grace is UNKNOWN:
            yield unchecked(f"{obj.display}: {spec_path}.terminationGracePeriodSeconds against {ref.path} preStop")
        elif not isinstance(wait, (int, float)) or not isinstance(grace, (int, float)):
            continue  # an exec/httpGet hook: no fixed wait to compare
        elif grace <= wait:
            yield violation(f"{obj.display}: {ref.path} waits {wait:g} s in preStop but the pod gets "
                            f"{grace:g} s to stop; set {spec_path}.terminationGracePeriodSeconds to at "
                            f"least {wait + 15:g}")


@resource_rule(
    "llm-serving-server-topology-spread",
    "A model server Deployment with more than one replica (or none written: autoscaled) spreads "
    "its pods over nodes: a topologySpreadConstraint on kubernetes.io/hostname whose "
    "labelSelector selects the pod template's own labels, so one node's loss or drain never takes "
    "every replica.",
    ("Deployment",),
    fix="Set the model's disruption.topologySpread (or platform.disruption.topologySpread) to `node` "
    "or `node-and-zone`; a stack that turns spread off on purpose sets this policy's enforcement "
    "level to `disabled`.",
    severity="medium", url="https://kubernetes.io/docs/concepts/scheduling-eviction/topology-spread-constraints/",
)
def topology_spread(obj: K8sObject, config: dict) -> Iterator[Finding]:
    is_server, findings = _server(obj)
    yield from findings
    if not is_server:
        return
    count = replicas(obj)
    if count is UNKNOWN:
        yield unchecked(f"{obj.display}: spec.replicas")
        return
    if not _several(count):
        return
    spec_path, spec = obj.pod_spec()
    constraints = as_list(get(spec, "topologySpreadConstraints", default=[]))
    labels = obj.pod_template_labels()
    if constraints is UNKNOWN or labels is UNKNOWN:
        yield unchecked(f"{obj.display}: {spec_path}.topologySpreadConstraints")
        return
    undecided = False
    for constraint in constraints:
        key, selects = get(constraint, "topologyKey"), _selects(get(constraint, "labelSelector", "matchLabels"), labels)
        if key == HOSTNAME_KEY and selects is True:
            return
        undecided = undecided or key is UNKNOWN or (key == HOSTNAME_KEY and selects is UNKNOWN)
    if undecided:
        yield unchecked(f"{obj.display}: {spec_path}.topologySpreadConstraints")
        return
    yield violation(f"{obj.display} runs {_count_text(count)} but does not spread them over nodes; add "
                    f"a {spec_path}.topologySpreadConstraints entry on {HOSTNAME_KEY} selecting its "
                    "pod labels (whenUnsatisfiable: ScheduleAnyway)")


def _selects(match_labels: Any, labels: Any) -> Any:
    """Whether a non-empty matchLabels selects pods carrying ``labels``: True, False, or UNKNOWN
    when a value that decides it is unknown during preview."""
    if match_labels is UNKNOWN or labels is UNKNOWN:
        return UNKNOWN
    if not isinstance(match_labels, dict) or not match_labels or not isinstance(labels, dict):
        return False
    undecided = False
    for key, value in match_labels.items():
        have = labels.get(key)
        if value is UNKNOWN or have is UNKNOWN:
            undecided = True
        elif have != value:
            return False
    return UNKNOWN if undecided else True


def _blocks_every_disruption(spec: Any, count: Any) -> Any:
    """True when a budget leaves no voluntary disruption for ``count`` healthy pods."""
    min_available, max_unavailable = get(spec, "minAvailable"), get(spec, "maxUnavailable")
    if min_available is UNKNOWN or max_unavailable is UNKNOWN or count is UNKNOWN:
        return UNKNOWN
    if isinstance(max_unavailable, (int, float)) and not isinstance(max_unavailable, bool):
        return max_unavailable == 0
    if max_unavailable in ("0%", "0"):
        return True
    if isinstance(min_available, (int, float)) and not isinstance(min_available, bool):
        return isinstance(count, (int, float)) and min_available >= count
    return min_available == "100%"


@stack_rule(
    "llm-serving-server-disruption-budget",
    "A model server Deployment with more than one replica has a PodDisruptionBudget in its "
    "namespace selecting its pods, so a node drain or cluster upgrade never evicts every replica "
    "at once; and no budget over server pods forbids every eviction (minAvailable at or above the "
    "replica count, or maxUnavailable 0), which would hold a node drain forever.",
    fix="One budget of maxUnavailable: 1 over the Deployment's selector, as the compiler renders for "
    "models with replicas > 1 or autoscaling (a server without spec.replicas counts as "
    "autoscaled); none for a single replica.",
    severity="medium", url="https://kubernetes.io/docs/tasks/run-application/configure-pdb/",
)
def disruption_budget(stack: Stack, config: dict) -> Iterator[Finding]:
    servers, budgets = [], []
    for resource, obj in stack.k8s_objects():
        if obj.kind == "Deployment":
            is_server, findings = _server(obj)
            yield from (Finding(f.message, resource.urn, True) for f in findings)
            if is_server:
                servers.append((resource, obj))
        elif obj.kind == "PodDisruptionBudget":
            budgets.append((resource, obj))
    for resource, obj in servers:
        count, labels = replicas(obj), obj.pod_template_labels()
        if count is UNKNOWN or labels is UNKNOWN:
            yield unchecked(f"{obj.display}: spec.replicas and pod labels", resource.urn)
            continue
        covering, undecided = [], False
        for budget_resource, budget in budgets:
            selects = _selects(get(budget.props, "spec", "selector", "matchLabels"), labels)
            if UNKNOWN in (budget.namespace, obj.namespace):
                same_namespace = UNKNOWN
            else:
                same_namespace = budget.namespace == obj.namespace
            if selects is True and same_namespace is True:
                covering.append((budget_resource, budget))
            elif selects is not False and same_namespace is not False:
                undecided = True
        for budget_resource, budget in covering:
            blocks = _blocks_every_disruption(get(budget.props, "spec"), count)
            if blocks is UNKNOWN:
                yield unchecked(f"{budget.display}: minAvailable/maxUnavailable", budget_resource.urn)
            elif blocks:
                pods = "autoscaled" if count == AUTOSCALED else f"{count:g}"
                yield violation(f"{budget.display} allows no eviction of {obj.display}'s {pods} "
                                "pod(s): a node drain would wait forever; use maxUnavailable: 1 "
                                "(or no budget for a single replica)", budget_resource.urn)
        if _several(count) and not covering and undecided:
            yield unchecked(f"{obj.display}: which PodDisruptionBudget selects its pods", resource.urn)
        elif _several(count) and not covering:
            yield violation(f"{obj.display} runs {_count_text(count)} but no PodDisruptionBudget in "
                            f"namespace '{obj.namespace}' selects its pods; add one of maxUnavailable: 1 "
                            "over its selector", resource.urn)
