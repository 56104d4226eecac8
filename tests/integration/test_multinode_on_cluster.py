"""A model across two nodes on the simulated cluster, with the real LeaderWorkerSet controller
(issue 22): sigs.k8s.io/lws v0.8.0's manager, its CRD and its webhooks, started by
scripts/cluster/cluster.sh.

The cluster has two fake 8-GPU nodes, shared with other stacks: a group of two 4-GPU pods, one
per node by the group's required anti-affinity, leaves room for them. In the file's order: `up`
of a Ray-mode model creates the LeaderWorkerSet, the controller creates its StatefulSets and pods
(one per node), status goes READY with the leader as the only target; a worker pod deleted makes
the controller recreate the group and the status says so; a switch to data-parallel mode rolls
the group over without surging (maxSurge 0); a third node the cluster does not have fails `up`
with the pending pod and its reason; destroy leaves nothing.
KWOK plays the kubelet: containers do not run, so what vLLM and Ray do inside the pods is not
proven here (docs/multi-node.md).
"""

from __future__ import annotations

import json
import time

import pytest

from testkit.harness import small_model, stack_config
from tests.support.fixture_crds import wait_for

pytestmark = pytest.mark.integration

MODEL = "duet"
LWS = f"{MODEL}-lws"  # the LeaderWorkerSet, its StatefulSets and pods are named after it
GROUP, VERSION, PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
WAIT = 120


def two_node(mode: str = "ray", nodes: int = 2, **spec) -> dict:
    return small_model(MODEL, gpus=4, tensorParallelSize=4, multiNode={"nodes": nodes, "mode": mode, **spec},
                       weights={"size": "1Gi", "accessMode": "ReadWriteMany"})


# The failing `up` waits out the pending timeout before it reports the pod left over: a short one
# there (the harness's 60 s is for pods that do come up).
SHORT_PENDING_TIMEOUT = 15


def config(namespace: str, model: dict | None = None, **platform) -> dict:
    return stack_config(namespace, [model or two_node()], **platform)


@pytest.fixture(scope="module")
def deployed(make_project, kube):
    require_lws(kube)
    project = make_project(config)
    project.up()
    return project


def require_lws(kube) -> None:
    try:
        kube.ApiextensionsV1Api().read_custom_resource_definition(f"{PLURAL}.{GROUP}")
    except kube.exceptions.ApiException as error:
        pytest.fail(f"the cluster has no LeaderWorkerSet CRD ({error.status}): start it with this branch's "
                    "scripts/cluster/cluster.sh, which installs it and runs the LWS controller")


def pods(kube, namespace: str) -> list:
    listing = kube.CoreV1Api().list_namespaced_pod(namespace, label_selector=f"leaderworkerset.sigs.k8s.io/name={LWS}")
    return [p for p in listing.items if p.metadata.deletion_timestamp is None]


def status(project) -> dict:
    return project.outputs()["models"][MODEL]["status"]


def status_record(project) -> dict:
    """The model's ModelStatus outputs as the state records them (what `pulumi refresh` updates;
    the stack outputs are those of the last `up`)."""
    exported = json.loads(project.run("stack", "export").stdout)
    (found,) = [r for r in (exported.get("deployment") or {}).get("resources") or []
                if r["type"].endswith(":ModelStatus") and r["urn"].rsplit("::", 1)[-1] == f"{MODEL}-status"]
    return found["outputs"]


def test_up_creates_the_lws_and_the_controller_its_statefulsets_and_pods_on_two_gpu_nodes(deployed, kube):
    namespace = deployed.namespace
    lws = kube.CustomObjectsApi().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, LWS)
    # Defaults the CRD and the LWS webhook applied (the real API server and controller ran).
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"] == 0
    assert lws["status"]["readyReplicas"] == 1
    sets = {s.metadata.name for s in kube.AppsV1Api().list_namespaced_stateful_set(namespace).items}
    assert sets == {LWS, f"{LWS}-0"}, sets  # the leaders' StatefulSet and group 0's workers'
    group = pods(kube, namespace)
    assert sorted(p.metadata.name for p in group) == [f"{LWS}-0", f"{LWS}-0-1"]
    assert sorted(p.spec.node_name for p in group) == ["gpu-node-0", "gpu-node-1"]
    for pod in group:
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        # Injected by the LWS pod webhook, which the cluster registers on loopback.
        assert env["LWS_LEADER_ADDRESS"] == f"{LWS}-0.{LWS}.{namespace}"
        assert env["LWS_GROUP_SIZE"] == "2"
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "4"


def test_status_is_ready_with_the_leader_as_the_only_target(deployed, kube):
    model = status(deployed)
    assert model["state"] == "READY", model
    assert model["message"].startswith("serving: 1 routable leader(s), 1/1 groups of 2 pods ready"), model
    assert model["targets"] == [f"{LWS}-0"]
    slices = kube.DiscoveryV1Api().list_namespaced_endpoint_slice(
        deployed.namespace, label_selector=f"kubernetes.io/service-name={MODEL}").items
    assert [e.target_ref.name for s in slices for e in s.endpoints or []] == [f"{LWS}-0"]


def test_a_deleted_worker_recreates_the_group_and_the_status_says_so(deployed, kube):
    namespace = deployed.namespace
    leader_uid = next(p.metadata.uid for p in pods(kube, namespace) if p.metadata.name == f"{LWS}-0")
    kube.CoreV1Api().delete_namespaced_pod(f"{LWS}-0-1", namespace)

    def recreated() -> bool:
        group = {p.metadata.name: p for p in pods(kube, namespace)}
        ready = all(any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
                    for p in group.values())
        return (len(group) == 2 and ready and group.get(f"{LWS}-0") is not None
                and group[f"{LWS}-0"].metadata.uid != leader_uid)

    wait_for(recreated, WAIT, "the LWS controller to recreate group 0 (a new leader and worker, both ready)")
    deployed.run("refresh", "--yes", "--skip-preview")
    model = status_record(deployed)
    assert model["state"] == "READY", model
    assert f"recreated by the LWS controller: Worker pod {LWS}-0-1 failed, deleted leader pod {LWS}-0" \
        in model["message"], model


def test_a_mode_change_rolls_the_group_over_without_surging(deployed, kube):
    # A surge group would need two more 4-GPU pods on nodes that hold this group: maxSurge 0.
    deployed.write_config(config(deployed.namespace, two_node("dataParallel")))
    deployed.up()
    model = status(deployed)
    assert model["state"] == "READY", model
    leader = next(p for p in pods(kube, deployed.namespace) if p.metadata.name == f"{LWS}-0")
    args = leader.spec.containers[0].args
    assert args[args.index("--data-parallel-size") + 1] == "2"  # 2 nodes × 4 GPUs / TP 4
    # Expanded by the kubelet at start, from the variable the LWS webhook injected.
    assert "$(LWS_LEADER_ADDRESS)" in args


def test_not_enough_gpu_nodes_fails_up_with_the_pending_pod_and_its_reason(deployed, kube):
    deployed.write_config(config(deployed.namespace, two_node("dataParallel", nodes=3),
                                 pendingTimeoutSeconds=SHORT_PENDING_TIMEOUT))
    started = time.monotonic()
    result = deployed.up(check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"model {MODEL} is ERROR: pod {LWS}-0-" in output, output[-3000:]
    assert "no free node for another pod of its group" in output and "reason: not-enough-nodes" in output, output[-3000:]
    assert time.monotonic() - started < 600


def test_destroy_leaves_nothing(deployed, kube):
    namespace = deployed.namespace
    deployed.run("destroy", "--yes", "--skip-preview")
    custom, apps = kube.CustomObjectsApi(), kube.AppsV1Api()

    def gone() -> bool:
        return (not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
                and not apps.list_namespaced_stateful_set(namespace).items and not pods(kube, namespace))

    wait_for(gone, WAIT, "the LeaderWorkerSet, its StatefulSets and pods to be gone")
    assert kube.CoreV1Api().list_namespaced_service(namespace, label_selector=f"llm-serving.dev/model={MODEL}").items == []
