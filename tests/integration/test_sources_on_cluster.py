"""Weight sources on the simulated cluster under the real engine (issue 23): an `s3` model (read at
a pinned object version, `versionAt`) and a `pvc` model deploy to READY next to each other, and `pulumi destroy` removes the s3 model's own
volume but leaves the existing claim the `pvc` model served from.

On KWOK no container runs: the puller Job's pod is made Succeeded by the cluster's stage
(scripts/cluster/stages/21-pod-complete.yaml), so this proves the objects, their order (the
server after the gate, the gate after the Job) and the ownership; the pull and verify commands
themselves run against a real S3 server in tests/puller/test_s3_puller.py and test_pvc_verify.py.
"""

from __future__ import annotations

import pytest

from testkit.harness import small_model, stack_config

pytestmark = pytest.mark.integration

CLAIM = "shared-weights"
VERSION_AT = "2026-11-30T18:00:00Z"


@pytest.fixture(scope="module")
def deployed(make_project, kube):
    def config(namespace: str) -> dict:
        return stack_config(namespace, [
            small_model("objstore", source={
                "type": "s3", "bucket": "models", "prefix": "tiny-llm/", "endpoint": "http://minio.storage.svc:9000",
                "credentials": {"secret": "s3-keys"}, "versionAt": VERSION_AT}),
            small_model("onclaim", source={"type": "pvc", "claimName": CLAIM, "subPath": "tiny-llm"},
                        weights={"accessMode": "ReadWriteOnce"}),
        ], createNamespace=False)

    project = make_project(config)
    core = kube.CoreV1Api()
    # What the platform team has before the stack exists: the namespace, the store's keys, and a
    # claim already filled with weights.
    core.create_namespace({"metadata": {"name": project.namespace}})
    core.create_namespaced_secret(project.namespace, {
        "metadata": {"name": "s3-keys"},
        "stringData": {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}})
    core.create_namespaced_persistent_volume_claim(project.namespace, {
        "metadata": {"name": CLAIM, "labels": {"team": "ml-platform"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-weights",
                 "resources": {"requests": {"storage": "10Gi"}}}})
    project.up()
    yield project
    core.delete_namespace(project.namespace)


def test_both_sources_serve(deployed):
    models = deployed.outputs()["models"]
    for name in ("objstore", "onclaim"):
        assert models[name]["status"]["state"] == "READY", models[name]


def test_s3_model_pulls_with_rclone_into_its_own_volume(deployed, kube):
    objects = deployed.outputs()["models"]["objstore"]["objects"]
    job = kube.BatchV1Api().read_namespaced_job(objects["puller"], deployed.namespace)
    spec = job.spec.template.spec
    assert [c.name for c in spec.init_containers] == ["pull"] and [c.name for c in spec.containers] == ["verify"]
    assert spec.init_containers[0].image == "docker.io/rclone/rclone:1.76.0"
    # A pinned object version: both steps read the bucket as it was then.
    for container in (spec.init_containers[0], spec.containers[0]):
        assert {e.name: e.value for e in container.env}["RCLONE_CONFIG_SRC_VERSION_AT"] == VERSION_AT
    assert job.status.completion_time is not None
    claim = kube.CoreV1Api().read_namespaced_persistent_volume_claim(objects["weights"], deployed.namespace)
    assert claim.metadata.name.startswith("objstore-weights-")


def test_pvc_model_serves_the_existing_claim_read_only(deployed, kube):
    objects = deployed.outputs()["models"]["onclaim"]["objects"]
    assert objects["weights"] == CLAIM
    deployment = kube.AppsV1Api().read_namespaced_deployment(objects["deployment"], deployed.namespace)
    volume = next(v for v in deployment.spec.template.spec.volumes if v.name == "weights")
    assert volume.persistent_volume_claim.claim_name == CLAIM and volume.persistent_volume_claim.read_only
    mount = next(m for m in deployment.spec.template.spec.containers[0].volume_mounts if m.name == "weights")
    assert (mount.sub_path, mount.read_only) == ("tiny-llm", True)
    job = kube.BatchV1Api().read_namespaced_job(objects["puller"], deployed.namespace)
    assert [c.name for c in job.spec.template.spec.containers] == ["verify"]
    assert not job.spec.template.spec.init_containers
    # The verify Job never chowns the user's volume (no fsGroup) and mounts it read-only.
    assert job.spec.template.spec.security_context.fs_group is None


def test_destroy_leaves_the_existing_claim(deployed, kube):
    core = kube.CoreV1Api()
    before = core.read_namespaced_persistent_volume_claim(CLAIM, deployed.namespace)
    objstore_claim = deployed.outputs()["models"]["objstore"]["objects"]["weights"]
    deployed.run("destroy", "--yes", "--skip-preview")
    after = core.read_namespaced_persistent_volume_claim(CLAIM, deployed.namespace)
    assert after.metadata.uid == before.metadata.uid and after.metadata.deletion_timestamp is None
    assert after.status.phase == "Bound" and after.metadata.labels == {"team": "ml-platform"}
    names = [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(deployed.namespace).items]
    assert objstore_claim not in names  # the s3 model's own volume went with the stack
