"""A model that changes and a model that sleeps: two revisions side by side (models[].next) and a
workload KEDA may scale to zero (autoscaling.minReplicas: 0).

- Two controllers whose selectors select each other's pods (a hand-made second Deployment of a
  model, labelled as the first) fight over them: each scales the other's pods as its own, and a
  rollout of one deletes the other's. Kubernetes leaves it undefined and does not refuse it.
- A ScaledObject that may scale to zero activates only on a trigger whose metric exists while no
  pod runs. A model's own metrics (its queue depth, its running requests) go with its last pod, so
  a workload at zero would never wake: the gateway's held requests are what wakes it.
"""

from __future__ import annotations

from collections.abc import Iterator

from .base import resource_rule, stack_rule
from .kube import UNKNOWN, Finding, K8sObject, Stack, as_list, get, unchecked, violation

# Kinds whose spec.selector owns the pods of their template.
CONTROLLER_KINDS = frozenset({"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"})
# The metric the gateway exports for the requests it holds (components/compile/autoscaling.py).
HELD_METRIC = "gateway_held_requests"


def _controllers(stack: Stack) -> list[tuple[str, object, object, object, K8sObject]]:
    found = []
    for resource, obj in stack.k8s_objects():
        if obj.kind in CONTROLLER_KINDS and obj.group == "apps":
            found.append((resource.urn, obj.namespace, get(obj.props, "spec", "selector"),
                          obj.pod_template_labels(), obj))
    return found


def _known_map(value: object) -> bool:
    return isinstance(value, dict) and all(v is not UNKNOWN and k is not UNKNOWN for k, v in value.items())


@stack_rule(
    "llm-serving-stack-controllers-own-their-pods",
    "No two Deployments, StatefulSets, ReplicaSets or DaemonSets of one namespace select each other's "
    "pods: controllers with overlapping selectors fight over the pods (Kubernetes does not refuse it), "
    "so a model's two revisions side by side must each select only their own.",
    fix="Give the second workload a label value of its own in both its selector and its pod template "
    "(models[].next does: its pods are `app.kubernetes.io/name: <model>-next`), or remove it.",
    severity="high",
    url="https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#selector",
)
def controllers_own_their_pods(stack: Stack, config: dict) -> Iterator[Finding]:
    controllers = _controllers(stack)
    for urn, namespace, selector, _, obj in controllers:
        match_labels, expressions = get(selector, "matchLabels"), get(selector, "matchExpressions")
        if expressions is not UNKNOWN and expressions:
            continue  # an expression selector is beyond a subset test
        if namespace is UNKNOWN or expressions is UNKNOWN or not _known_map(match_labels):
            yield unchecked(f"{obj.display}: the pods its selector selects", urn)
            continue
        if not match_labels:
            continue  # an empty selector is refused by the API server itself
        for other_urn, other_namespace, _, labels, other in controllers:
            if other_urn == urn or other_namespace != namespace:
                continue
            if not _known_map(labels):
                if labels is UNKNOWN or isinstance(labels, dict):
                    yield unchecked(f"{obj.display}: whether it selects {other.display}'s pods", urn)
                continue
            if all(labels.get(key) == value for key, value in match_labels.items()):
                yield violation(f"{obj.display}'s selector {match_labels} also selects {other.display}'s pods: the "
                                "two controllers would fight over them", urn)


@resource_rule(
    "llm-serving-scaled-object-wakes-from-zero",
    "A KEDA ScaledObject that may scale its workload to zero (minReplicaCount 0) has a Prometheus "
    "trigger on the gateway's held requests (gateway_held_requests) with an activationThreshold: the "
    "model's own metrics go with its last pod, so nothing else would ever wake it.",
    {"ScaledObject"},
    fix="Set models[].autoscaling.minReplicas: 0 only on a model the router's gateway fronts with "
    "router.gateway.hold on (the compiler then adds the wake trigger), or set minReplicaCount to 1.",
    severity="high",
    url="https://keda.sh/docs/2.16/concepts/scaling-deployments/#activating-and-scaling-thresholds",
)
def wakes_from_zero(obj: K8sObject, config: dict) -> Iterator[Finding]:
    floor = get(obj.props, "spec", "minReplicaCount")
    if floor is UNKNOWN:
        yield unchecked(f"{obj.display}: spec.minReplicaCount")
        return
    if floor not in (None, 0):
        return  # unset is KEDA's default, 0
    triggers = get(obj.props, "spec", "triggers")
    if triggers is UNKNOWN:
        yield unchecked(f"{obj.display}: spec.triggers")
        return
    for trigger in as_list(triggers):
        query = get(trigger, "metadata", "query")
        activation = get(trigger, "metadata", "activationThreshold")
        if query is UNKNOWN or activation is UNKNOWN:
            yield unchecked(f"{obj.display}: its triggers' queries")
            return
        if get(trigger, "type") == "prometheus" and isinstance(query, str) and HELD_METRIC in query \
                and activation is not None:
            return
    yield violation(f"{obj.display} may scale to zero but no trigger reads {HELD_METRIC} with an "
                    "activationThreshold: at zero pods nothing would wake it")
