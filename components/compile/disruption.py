"""How a model server's pods leave: PodDisruptionBudget, drain (preStop wait and grace period) and
topology spread. Pure: typed config in, manifest fragments out.

Order of a pod's stop (Kubernetes): the pod is marked terminating and leaves its Service's ready
endpoints at once; the kubelet runs every container's ``preStop`` hook in parallel and sends each
container SIGTERM when its own hook returns; SIGKILL follows when terminationGracePeriodSeconds
(counted from the start, hooks included) runs out.

- Engine container: vLLM 0.11 aborts running generations on SIGTERM (see
  ``components.config.disruption``), so its ``preStop`` waits ``drainSeconds`` first.
- pylon (router-fronted pods): on SIGTERM it cancels its registration streams and tunnels at
  once (NVIDIA/nvcf chart 0.16.2 source, devilkun/nvcf@e07119fa
  ``crates/pylon/src/startup.rs`` ``run_until_shutdown`` / ``shutdown``; it has no drain mode),
  and the router's requests to this model flow through those tunnels. It gets the same wait,
  so it neither cuts the engine's streams early nor outlives the engine. Known limit: pylon
  stays registered during the wait, so the router may still start new requests on a stopping
  pod (the Service path has no such gap: the pod is out of its endpoints).
- The wait is the native ``sleep`` action, not ``exec: sleep``: it needs no binary in the image
  (pylon's image is not known to carry one). KEP-3960: alpha 1.29, on by default since 1.30
  (beta), GA in 1.34.
"""

from __future__ import annotations

from typing import Optional

from ..config.disruption import DisruptionPolicy
from ..config.model import ModelConfig, replica_ceiling
from ..config.platform import PlatformConfig

HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"


def may_run_several(model: ModelConfig) -> bool:
    """Whether the model's server may run more than one pod: the one predicate behind its
    PodDisruptionBudget and topology spread: an autoscaled model counts its ``maxReplicas``."""
    return replica_ceiling(model) > 1


def pod_disruption_budget(model: ModelConfig, metadata: dict, selector: dict) -> Optional[dict]:
    """A budget of ``maxUnavailable: 1`` for a model that may run several pods; none otherwise.

    maxUnavailable, not minAvailable: it always leaves one voluntary eviction to a node drain
    when every pod is healthy, whatever the replica count (no budget to re-tune when replicas or
    an autoscaler change it), and never blocks a drain forever the way ``minAvailable: 1`` does
    on a single pod. The same budget as the router's and its backend router's
    (``components.compile.router``). One pod: no budget at all, since the only outcome a budget
    could give it is a node drain that never ends.

    unhealthyPodEvictionPolicy AlwaysAllow (GA in Kubernetes 1.31): a pod that is not ready
    serves nothing, so evicting it costs nothing; the default (IfHealthyBudget) would let a
    crash-looping replica block every node drain.
    """
    if not may_run_several(model):
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata,
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": dict(selector)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def pre_stop(policy: DisruptionPolicy) -> dict:
    """A container's ``lifecycle`` field: wait the drain before SIGTERM (nothing at 0)."""
    if policy.drain_seconds == 0:
        return {}
    return {"lifecycle": {"preStop": {"sleep": {"seconds": policy.drain_seconds}}}}


def with_drain(containers: list[dict], policy: DisruptionPolicy) -> list[dict]:
    """Every container with the drain wait; the grace period is the pod's (``drain_pod_fields``)."""
    return [{**container, **pre_stop(policy)} for container in containers]


def drain_pod_fields(policy: DisruptionPolicy) -> dict:
    return {"terminationGracePeriodSeconds": policy.grace_seconds}


def topology_spread(model: ModelConfig, policy: DisruptionPolicy, selector: dict) -> dict:
    """Pod spec fields spreading a multi-pod model's pods over nodes (and zones).

    whenUnsatisfiable ScheduleAnyway: a preference, never a reason to stay Pending. GPU nodes are
    few and often full; with DoNotSchedule a second replica would wait for a free GPU on another
    node while one sits idle beside the first replica.
    """
    if not may_run_several(model) or policy.topology_spread == "off":
        return {}
    keys = [HOSTNAME_KEY] + ([ZONE_KEY] if policy.topology_spread == "node-and-zone" else [])
    return {"topologySpreadConstraints": [{
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": dict(selector)},
    } for key in keys]}


def preferred_anti_affinity(model: ModelConfig, policy: DisruptionPolicy, selector: dict) -> dict:
    """The same preference for the NIM operator path, whose NIMService takes a core/v1 ``affinity``
    but no ``topologySpreadConstraints`` (k8s-nim-operator v3.1.2, spec.affinity): preferred pod
    anti-affinity per node (weight 100) and per zone (weight 50) against the model's own pods."""
    if not may_run_several(model) or policy.topology_spread == "off":
        return {}
    keys = [(HOSTNAME_KEY, 100)] + ([(ZONE_KEY, 50)] if policy.topology_spread == "node-and-zone" else [])
    return {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": weight,
        "podAffinityTerm": {"topologyKey": key, "labelSelector": {"matchLabels": dict(selector)}},
    } for key, weight in keys]}}}


def policy_of(model: ModelConfig, platform: PlatformConfig) -> DisruptionPolicy:
    return model.disruption_policy(platform.disruption)
