"""The weights puller lands where the server will (issue 15 item 6), on the simulated cluster.

The cluster (scripts/cluster/cluster.sh) has GPU nodes in two zones and a CPU node, and the
StorageClass `local-node`: WaitForFirstConsumer binding to pre-created `local` PVs pinned to
each node, CPU node included. The claim of a ReadWriteOnce weights volume is bound where its
first consumer, the puller, is scheduled; the server then can only run on that node. With no
GPU node selector configured, the puller must still land on a GPU node (the required GPU node
affinity of compile/weights.py), and the server must start on the same node and zone.
"""

from __future__ import annotations

import uuid

import pytest

from testkit.harness import small_model, stack_config

pytestmark = pytest.mark.integration

CLASS = "local-node"
POOL = f"llm-serving/volume-pool={CLASS}"
ZONE = "topology.kubernetes.io/zone"


def reclaim_released(core) -> None:
    """Volumes of this class left Released by an earlier run go back to Available (Retain)."""
    for pv in core.list_persistent_volume(label_selector=POOL).items:
        if pv.status.phase == "Released":
            core.patch_persistent_volume(pv.metadata.name, [{"op": "remove", "path": "/spec/claimRef"}])


@pytest.fixture(scope="module")
def gpu_nodes_look_busy(kube):
    core = kube.CoreV1Api()
    namespace = f"placement-filler-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    gpu_nodes = [n.metadata.name for n in core.list_node(label_selector="nvidia.com/gpu.present=true").items]
    for node in gpu_nodes:
        core.create_namespaced_pod(namespace, {"metadata": {"name": f"filler-{node}"}, "spec": {
            "nodeName": node,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "filler", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "8", "memory": "64Gi"}}}]}})
    yield gpu_nodes
    core.delete_namespace(namespace)


@pytest.fixture(scope="module")
def deployed(make_project, kube, gpu_nodes_look_busy):
    core = kube.CoreV1Api()
    storage = kube.StorageV1Api()
    names = [c.metadata.name for c in storage.list_storage_class().items]
    assert CLASS in names, f"StorageClass {CLASS} missing: start the cluster with this branch's scripts/cluster/cluster.sh"
    assert storage.read_storage_class(CLASS).volume_binding_mode == "WaitForFirstConsumer"
    reclaim_released(core)
    # The CPU node offers a free volume too: a puller placed there would take it.
    available = [pv for pv in core.list_persistent_volume(label_selector=POOL).items if pv.status.phase == "Available"]
    assert any(pv_node(pv).startswith("cpu-node-") for pv in available), "no free local-node PV on the CPU node"
    assert any(pv_node(pv).startswith("gpu-node-") for pv in available), "no free local-node PV on a GPU node"
    # No gpuNodeSelector: only the puller's own GPU-node rule keeps it off the CPU node.
    model = small_model("placed", weights={"size": "1Gi", "storageClassName": CLASS, "accessMode": "ReadWriteOnce"})
    project = make_project(lambda ns: stack_config(ns, [model]))
    project.up()
    return project


def pv_node(pv) -> str:
    (term,) = pv.spec.node_affinity.required.node_selector_terms
    (expression,) = term.match_expressions
    return expression.values[0]


def objects(project) -> dict:
    return project.outputs()["models"]["placed"]["objects"]


def puller_node(project, kube) -> str:
    """Where the scheduler put the puller (its pods are gone after the hand-off): the Scheduled
    events of its pods, all on one node."""
    core = kube.CoreV1Api()
    events = core.list_namespaced_event(project.namespace, field_selector="reason=Scheduled").items
    puller = objects(project)["puller"]
    nodes = {e.message.rsplit(" to ", 1)[-1] for e in events if e.involved_object.name.startswith(puller)}
    assert len(nodes) == 1, (puller, [e.message for e in events])
    return nodes.pop()


def test_the_puller_lands_on_a_gpu_node(deployed, kube):
    node = kube.CoreV1Api().read_node(puller_node(deployed, kube))
    assert node.metadata.labels.get("nvidia.com/gpu.present") == "true", node.metadata.name


def test_the_volume_is_bound_on_the_pullers_node(deployed, kube):
    core = kube.CoreV1Api()
    claim = core.read_namespaced_persistent_volume_claim(objects(deployed)["weights"], deployed.namespace)
    assert claim.status.phase == "Bound"
    assert pv_node(core.read_persistent_volume(claim.spec.volume_name)) == puller_node(deployed, kube)


def test_the_server_starts_on_the_same_node_and_zone(deployed, kube):
    core = kube.CoreV1Api()
    assert deployed.outputs()["models"]["placed"]["status"]["state"] == "READY"
    pods = core.list_namespaced_pod(deployed.namespace, label_selector=(
        "app.kubernetes.io/name=placed,app.kubernetes.io/component=server")).items
    assert pods and all(p.status.phase == "Running" for p in pods)
    where = puller_node(deployed, kube)
    zone = core.read_node(where).metadata.labels[ZONE]
    for pod in pods:
        assert pod.spec.node_name == where
        assert core.read_node(pod.spec.node_name).metadata.labels[ZONE] == zone
