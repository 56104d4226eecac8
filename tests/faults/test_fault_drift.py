"""(e) Objects deleted out of band: `pulumi refresh` + `pulumi up` heals, and re-pulls the weights
only when the weights volume is really gone.

1. The Deployment and the Service go (someone's `kubectl delete`): refresh drops them from the
   state, up re-creates them; the weights volume and the puller Job are untouched (same uid, the
   gate still stands), and the status is READY again (not the PENDING the refresh recorded).
2. The weights volume goes (with its Deployment: a volume in use is only Terminating until its
   pods are gone): refresh drops the volume and the gate (the gate stands only while its volume
   and its Job's success do), up re-creates the volume, and the gate re-runs the puller: the
   Job that completed before this volume existed proves nothing about its contents.
"""

from __future__ import annotations

import pytest

from testkit.harness import small_model, stack_config
from tests.support.fault_kit import assert_state_matches_cluster

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture(scope="module")
def deployed(fault_project):
    project = fault_project(lambda ns: stack_config(ns, [small_model("tiny")]))
    project.up()
    return project


def _uids(cluster, project) -> dict[str, str]:
    objects = project.outputs()["models"]["tiny"]["objects"]
    found = {}
    for kind, name in (("pvc", objects["weights"]), ("job", objects["puller"]), ("deployment", objects["deployment"]),
                       ("service", objects["service"])):
        obj = cluster.read(kind, name, project.namespace)
        found[kind] = obj.metadata.uid if obj else None
    return found


def _heal(project) -> float:
    refresh = project.timed("refresh", "--yes")
    assert refresh.returncode == 0, refresh.output[-5000:]
    up = project.timed("up", "--yes", "--skip-preview")
    assert up.returncode == 0, up.output[-5000:]
    assert "already exists" not in up.output
    return refresh.seconds + up.seconds


def _delete(cluster, project, *kinds: str) -> None:
    objects = project.outputs()["models"]["tiny"]["objects"]
    ns = project.namespace
    deleters = {"deployment": (cluster.apps.delete_namespaced_deployment, "deployment"),
                "service": (cluster.core.delete_namespaced_service, "service"),
                "pvc": (cluster.core.delete_namespaced_persistent_volume_claim, "weights")}
    for kind in kinds:
        delete, key = deleters[kind]
        delete(objects[key], ns)
    for kind in kinds:
        _, key = deleters[kind]
        cluster.wait(f"{kind} {objects[key]} to go",
                     lambda kind=kind, key=key: cluster.read(kind, objects[key], ns) is None, timeout=60)


def _assert_healed(cluster, project) -> None:
    status = project.outputs()["models"]["tiny"]["status"]
    assert status["state"] == "READY", status
    assert all(_uids(cluster, project).values())
    assert_state_matches_cluster(project, cluster)
    project.run("preview", "--expect-no-changes")


def test_deleted_deployment_and_service_heal_without_a_re_pull(deployed, cluster):
    before = _uids(cluster, deployed)
    _delete(cluster, deployed, "deployment", "service")
    seconds = _heal(deployed)
    print(f"\n(e) Deployment + Service deleted: refresh + up {seconds:.1f} s")
    after = _uids(cluster, deployed)
    assert after["deployment"] != before["deployment"] and after["service"] != before["service"]
    assert (after["pvc"], after["job"]) == (before["pvc"], before["job"]), "the weights must not be re-pulled"
    _assert_healed(cluster, deployed)


def test_deleted_weights_volume_is_re_created_and_re_pulled(deployed, cluster):
    before = _uids(cluster, deployed)
    _delete(cluster, deployed, "deployment", "pvc")
    seconds = _heal(deployed)
    print(f"(e) weights volume (+ Deployment) deleted: refresh + up {seconds:.1f} s")
    after = _uids(cluster, deployed)
    assert after["pvc"] != before["pvc"]
    assert after["job"] != before["job"], "a new volume needs a new pull"
    objects = deployed.outputs()["models"]["tiny"]["objects"]
    job = cluster.read("job", objects["puller"], deployed.namespace)
    volume = cluster.read("pvc", objects["weights"], deployed.namespace)
    assert job.status.succeeded == 1
    assert job.metadata.creation_timestamp >= volume.metadata.creation_timestamp  # pulled into this volume
    deployment = cluster.read("deployment", objects["deployment"], deployed.namespace)
    assert deployment.metadata.creation_timestamp >= job.status.completion_time  # served after the pull
    _assert_healed(cluster, deployed)
