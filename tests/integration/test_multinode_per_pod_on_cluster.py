"""Per-pod weights of a multi-node model on the simulated cluster (issue 22 item 4), with the real
LeaderWorkerSet v0.8.0 controller: `multiNode.weights: perPod` on node-local disks (StorageClass
`local-node`: WaitForFirstConsumer, `local` PVs pinned to each node, as on a GPU cluster without
ReadWriteMany storage).

In the file's order: `up` creates the LeaderWorkerSet and no weights volume, puller Job or gate of
the model's; the LWS controller passes the claim template to its StatefulSets, whose controller
creates one claim per pod (`weights-<pod>`), each bound to a volume on the node its pod was
scheduled to; status READY. A revision change replaces the group: the leader keeps its claim, the
worker's is re-created with its StatefulSet; the pods read the new revision's directory. Another
weights size replaces the LeaderWorkerSet (claim templates are immutable). Destroy:
the claims go with the LWS (retention policy Delete), so nothing of the model's is left; the
volumes, the cluster's, are released.

KWOK plays the kubelet: no container runs, init containers included (its pod stage reports them
done), so the pull and verify steps are proven by tests/puller/test_per_pod_pull.py instead, and
their failures' reports by tests/providers/test_pod_weights.py.
"""

from __future__ import annotations

import pytest

from testkit.harness import small_model, stack_config
from tests.integration.test_multinode_on_cluster import GROUP, PLURAL, VERSION, WAIT, require_lws
from tests.integration.test_placement_on_cluster import CLASS, POOL, reclaim_released
from tests.support.fixture_crds import wait_for

pytestmark = pytest.mark.integration

MODEL = "perpod"
LWS = f"{MODEL}-lws"
CLAIMS = [f"weights-{LWS}-0", f"weights-{LWS}-0-1"]  # <claim template>-<statefulset>-<ordinal>


def per_pod_model(revision: str = "main", size: str = "1Gi") -> dict:
    return small_model(MODEL, revision, gpus=4, tensorParallelSize=4, multiNode={"nodes": 2, "weights": "perPod"},
                       weights={"size": size, "storageClassName": CLASS, "accessMode": "ReadWriteOnce"})


@pytest.fixture(scope="module")
def deployed(make_project, kube):
    require_lws(kube)
    core = kube.CoreV1Api()
    reclaim_released(core)  # volumes an earlier run left Released (the class's PVs are Retain)
    free = [pv for pv in core.list_persistent_volume(label_selector=POOL).items
            if pv.status.phase == "Available" and pv.metadata.name.startswith("local-node-gpu-node-")]
    assert {pv.metadata.name.rsplit("-", 1)[0] for pv in free} >= {"local-node-gpu-node-0", "local-node-gpu-node-1"}, \
        "no free local-node volume on each GPU node"
    project = make_project(lambda ns: stack_config(ns, [per_pod_model()]))
    project.up()
    yield project
    reclaim_released(core)


def claims(kube, namespace: str) -> dict:
    return {c.metadata.name: c for c in kube.CoreV1Api().list_namespaced_persistent_volume_claim(namespace).items}


def test_up_creates_one_claim_per_pod_bound_on_its_pods_node_and_no_job_or_shared_volume(deployed, kube):
    namespace = deployed.namespace
    lws = kube.CustomObjectsApi().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, LWS)
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert [t["metadata"]["name"] for t in lwt["volumeClaimTemplates"]] == ["weights"]
    assert lwt["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Delete"}
    # The LWS controller handed the template and the policy to both StatefulSets.
    for sts in kube.AppsV1Api().list_namespaced_stateful_set(namespace).items:
        assert [t.metadata.name for t in sts.spec.volume_claim_templates] == ["weights"], sts.metadata.name
        assert sts.spec.persistent_volume_claim_retention_policy.when_deleted == "Delete"
    found = claims(kube, namespace)
    assert sorted(found) == CLAIMS, sorted(found)  # no shared `<model>-weights-<hash>` claim
    assert kube.BatchV1Api().list_namespaced_job(namespace).items == []
    pods = {p.metadata.name: p for p in kube.CoreV1Api().list_namespaced_pod(
        namespace, label_selector=f"leaderworkerset.sigs.k8s.io/name={LWS}").items}
    assert sorted(p.spec.node_name for p in pods.values()) == ["gpu-node-0", "gpu-node-1"]
    core = kube.CoreV1Api()
    for name, claim in found.items():
        assert claim.status.phase == "Bound", (name, claim.status.phase)
        assert claim.spec.storage_class_name == CLASS and claim.spec.resources.requests["storage"] == "1Gi"
        # whenDeleted: Delete, as the StatefulSet controller does it: the claim is owned by its
        # StatefulSet, so the garbage collector deletes it with the LWS (not only with the namespace).
        owners = [(o.kind, o.name) for o in claim.metadata.owner_references or []]
        statefulset = name.removeprefix("weights-").rsplit("-", 1)[0]
        assert ("StatefulSet", statefulset) in owners, (name, owners)
        # Each pod's claim is bound to a volume on the node its pod runs on (WaitForFirstConsumer).
        pod = pods[name.removeprefix("weights-")]
        pv = core.read_persistent_volume(claim.spec.volume_name)
        assert pv.metadata.name.startswith(f"local-node-{pod.spec.node_name}-"), (name, pv.metadata.name)
        # The StatefulSet controller made the pod mount it; the init containers come first.
        (volume,) = [v for v in pod.spec.volumes if v.name == "weights"]
        assert volume.persistent_volume_claim.claim_name == name
        assert [c.name for c in pod.spec.init_containers] == ["weights-pull", "weights-prune"]


def test_status_is_ready(deployed):
    model = deployed.outputs()["models"][MODEL]
    assert model["status"]["state"] == "READY", model["status"]
    assert model["status"]["message"].startswith("serving: 1 routable leader(s), 1/1 groups of 2 pods ready")
    assert "puller" not in model["objects"] and "weights" not in model["objects"]


def test_a_revision_change_replaces_the_group_the_leader_keeps_its_claim_the_workers_get_new_ones(deployed, kube):
    namespace = deployed.namespace
    before = {name: claim.metadata.uid for name, claim in claims(kube, namespace).items()}
    old_directories = directories(kube, namespace)
    assert len(old_directories) == 1, old_directories
    leader_uid = kube.CoreV1Api().read_namespaced_pod(f"{LWS}-0", namespace).metadata.uid
    deployed.write_config(stack_config(namespace, [per_pod_model("v2")]))
    deployed.up()
    assert deployed.outputs()["models"][MODEL]["status"]["state"] == "READY"
    # The group was replaced (maxSurge 0: no surge group). The leaders' StatefulSet stays, so the
    # leader keeps its claim; a group's workers' StatefulSet is owned by its leader pod (lws v0.8.0
    # pod_controller), so it goes with the old leader, and its claims with it (whenDeleted:
    # Delete): the new workers get new claims, and pull again.
    after = {name: claim.metadata.uid for name, claim in claims(kube, namespace).items()}
    assert sorted(after) == CLAIMS
    assert after[f"weights-{LWS}-0"] == before[f"weights-{LWS}-0"]
    assert after[f"weights-{LWS}-0-1"] != before[f"weights-{LWS}-0-1"]
    pods = kube.CoreV1Api().list_namespaced_pod(namespace, label_selector=f"leaderworkerset.sigs.k8s.io/name={LWS}").items
    assert f"{LWS}-0" in {p.metadata.name for p in pods}
    assert all(p.metadata.annotations["llm-serving.dev/model-source"] == "acme/tiny-llm@v2" for p in pods)
    assert kube.CoreV1Api().read_namespaced_pod(f"{LWS}-0", namespace).metadata.uid != leader_uid
    new_directories = directories(kube, namespace)  # the new source's hash
    assert len(new_directories) == 1 and new_directories != old_directories, (old_directories, new_directories)


def directories(kube, namespace: str) -> set[str]:
    """The weights directories (subPath) every container of the group pods mounts."""
    found = set()
    for pod in kube.CoreV1Api().list_namespaced_pod(namespace, label_selector=f"leaderworkerset.sigs.k8s.io/name={LWS}").items:
        for container in [*pod.spec.init_containers, *pod.spec.containers]:
            found.update(m.sub_path for m in container.volume_mounts or [] if m.name == "weights" and m.sub_path)
    return found


def test_another_weights_size_replaces_the_leader_worker_set_and_its_claims(deployed, kube):
    # A StatefulSet's claim templates are immutable: the LWS is replaced (delete, then create).
    namespace = deployed.namespace
    before = kube.CustomObjectsApi().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, LWS)
    deployed.write_config(stack_config(namespace, [per_pod_model("v2", size="2Gi")]))
    deployed.up()
    assert deployed.outputs()["models"][MODEL]["status"]["state"] == "READY"
    after = kube.CustomObjectsApi().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, LWS)
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    found = claims(kube, namespace)
    assert sorted(found) == CLAIMS
    assert {c.spec.resources.requests["storage"] for c in found.values()} == {"2Gi"}
    assert all(c.status.phase == "Bound" for c in found.values())


def test_destroy_deletes_the_per_pod_claims(deployed, kube):
    namespace = deployed.namespace
    bound = {name: claim.spec.volume_name for name, claim in claims(kube, namespace).items()}
    deployed.run("destroy", "--yes", "--skip-preview")
    custom, apps, core = kube.CustomObjectsApi(), kube.AppsV1Api(), kube.CoreV1Api()

    def gone() -> bool:
        return (not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
                and not apps.list_namespaced_stateful_set(namespace).items and not claims(kube, namespace))

    wait_for(gone, WAIT, "the LeaderWorkerSet, its StatefulSets and the per-pod claims to be gone")
    # The volumes are the cluster's (reclaim policy Retain here): released, not deleted (the
    # cluster's pv-reclaim stage then makes them Available again).
    for claim, volume in bound.items():
        pv = core.read_persistent_volume(volume)
        assert pv.status.phase in ("Released", "Available"), (volume, pv.status.phase)
        ref = pv.spec.claim_ref
        assert ref is None or (ref.namespace, ref.name) != (namespace, claim) or pv.status.phase == "Released", volume
