"""Disruption and drain on the simulated cluster (issue 16, item 3): a two-replica model on shared
(ReadWriteMany) weights gets a PodDisruptionBudget that selects exactly its server pods, the
Eviction API lets one pod go and refuses the next while the first is gone, and the pods carry the
drain and the spread.

The simulated cluster's kube-controller-manager runs its default controllers (no --controllers
flag), the disruption controller among them: it fills the budget's status, which the Eviction API
reads. KWOK deletes a pod as soon as it is marked for deletion (its `pod-delete` stage), so the
long grace period never slows these tests' clean-up.
"""

from __future__ import annotations

import time

import pytest

from testkit.harness import small_model, stack_config

pytestmark = pytest.mark.integration

MODEL = "duo"


def config(namespace: str) -> dict:
    model = small_model(MODEL, replicas=2, weights={"size": "1Gi", "accessMode": "ReadWriteMany"})
    return stack_config(namespace, [model])


@pytest.fixture(scope="module")
def deployed(make_project):
    project = make_project(config)
    project.up()
    return project


def _selector(match_labels: dict) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(match_labels.items()))


def _live(pods) -> list:
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def _budget(kube, namespace: str, want_allowed: int, timeout: float = 60):
    """The budget once the disruption controller has counted the pods (status caught up)."""
    policy = kube.PolicyV1Api()
    deadline = time.monotonic() + timeout
    while True:
        pdb = policy.read_namespaced_pod_disruption_budget(MODEL, namespace)
        status = pdb.status
        if (status is not None and status.observed_generation == pdb.metadata.generation
                and status.expected_pods == 2 and status.disruptions_allowed == want_allowed):
            return pdb
        if time.monotonic() > deadline:
            raise AssertionError(f"budget status never reached {want_allowed} allowed disruption(s): {status}")
        time.sleep(1)


def _evict(kube, namespace: str, pod: str) -> None:
    body = kube.V1Eviction(metadata=kube.V1ObjectMeta(name=pod, namespace=namespace))
    kube.CoreV1Api().create_namespaced_pod_eviction(pod, namespace, body)


def test_the_budget_selects_exactly_the_server_pods(deployed, kube):
    namespace = deployed.namespace
    pdb = _budget(kube, namespace, want_allowed=1)
    assert pdb.spec.max_unavailable == 1 and pdb.spec.min_available is None
    assert pdb.spec.unhealthy_pod_eviction_policy == "AlwaysAllow"
    deployment = kube.AppsV1Api().read_namespaced_deployment(MODEL, namespace)
    core = kube.CoreV1Api()
    selected = {p.metadata.name for p in _live(core.list_namespaced_pod(
        namespace, label_selector=_selector(pdb.spec.selector.match_labels)).items)}
    servers = {p.metadata.name for p in _live(core.list_namespaced_pod(
        namespace, label_selector=_selector(deployment.spec.selector.match_labels)).items)}
    assert len(servers) == 2 and selected == servers, (selected, servers)
    # The budget counts these two and nothing else (_budget waited for expectedPods == 2), and its
    # selector is the Deployment's own: no other pod of the model (its puller) can be counted.
    assert pdb.spec.selector.match_labels == deployment.spec.selector.match_labels


def test_the_pods_carry_the_drain_and_the_spread(deployed, kube):
    template = kube.AppsV1Api().read_namespaced_deployment(MODEL, deployed.namespace).spec.template
    (server,) = template.spec.containers
    assert server.lifecycle.pre_stop.sleep.seconds == 120
    assert template.spec.termination_grace_period_seconds == 135
    (spread,) = template.spec.topology_spread_constraints
    assert (spread.topology_key, spread.when_unsatisfiable) == ("kubernetes.io/hostname", "ScheduleAnyway")
    pods = _live(kube.CoreV1Api().list_namespaced_pod(
        deployed.namespace, label_selector=_selector(spread.label_selector.match_labels)).items)
    # Two GPU nodes with room: the preference puts one replica on each.
    assert len({p.spec.node_name for p in pods}) == 2, [(p.metadata.name, p.spec.node_name) for p in pods]


def _hold_replacements(kube, namespace: str) -> None:
    """A pod quota one below what runs now, so the ReplicaSet cannot replace an evicted pod.

    KWOK makes a replacement ready within milliseconds, and the disruption controller would then
    count two healthy pods again before the second eviction arrives: the quota keeps the first
    pod gone, as it stays on a real cluster while a new replica loads its model for minutes."""
    core = kube.CoreV1Api()
    running = [p for p in core.list_namespaced_pod(namespace).items
               if p.status.phase not in ("Succeeded", "Failed")]
    quota = kube.V1ResourceQuota(metadata=kube.V1ObjectMeta(name="hold-replacements"),
                                 spec=kube.V1ResourceQuotaSpec(hard={"pods": str(len(running) - 1)}))
    core.create_namespaced_resource_quota(namespace, quota)
    deadline = time.monotonic() + 60
    while not (core.read_namespaced_resource_quota("hold-replacements", namespace).status.used or {}):
        assert time.monotonic() < deadline, "the quota controller never counted the namespace's pods"
        time.sleep(0.5)


def test_eviction_admits_one_pod_and_refuses_the_second(deployed, kube):
    namespace = deployed.namespace
    pdb = _budget(kube, namespace, want_allowed=1)
    first, second = sorted(p.metadata.name for p in _live(kube.CoreV1Api().list_namespaced_pod(
        namespace, label_selector=_selector(pdb.spec.selector.match_labels)).items))
    _hold_replacements(kube, namespace)
    _evict(kube, namespace, first)
    # The first is gone (or terminating) and has no ready replacement: the budget has no
    # disruption left, so the second eviction is refused with 429 Too Many Requests, both at
    # once and after the disruption controller has recounted.
    for _ in range(2):
        with pytest.raises(kube.exceptions.ApiException) as refused:
            _evict(kube, namespace, second)
        assert refused.value.status == 429, refused.value
        assert "disruption budget" in refused.value.body.lower(), refused.value.body
        _budget(kube, namespace, want_allowed=0)
    # Once the replacement may start and is ready, the budget allows one eviction again.
    kube.CoreV1Api().delete_namespaced_resource_quota("hold-replacements", namespace)
    _budget(kube, namespace, want_allowed=1, timeout=120)


def test_destroy_does_not_wait_out_the_grace_period(deployed):
    # 135 s of grace per server pod: a cluster that waited it out would hold destroy that long.
    started = time.monotonic()
    deployed.run("destroy", "--yes", "--skip-preview")
    elapsed = time.monotonic() - started
    print(f"destroy of a two-replica model with 135 s grace: {elapsed:.1f} s")
    assert elapsed < 120, elapsed
