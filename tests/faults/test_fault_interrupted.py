"""(d) `pulumi up` killed (SIGKILL) while the gate waits for the weights, then recovered.

What the engine leaves behind, measured here: the file backend's lock (the next `up` refuses:
"the stack is currently locked"), a pending *create* of the gate in the state, and the killed
engine's plugins (language host, Kubernetes provider, the dynamic-provider host still polling).
The recovery procedure docs/08-troubleshooting.md documents, run here exactly:

    pulumi cancel --yes                            # remove the dead update's lock (no other update running!)
    pulumi refresh --yes --clear-pending-creates   # forget interrupted creates; re-read the rest
    pulumi up                                      # re-creates the gate; objects that exist are adopted

It converges with no duplicate object, no "already exists", no re-pull (the puller finished while
nobody watched), and nothing left pending.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from datetime import UTC, datetime

import pytest

from testkit.harness import small_model, stack_config
from tests.support.fault_kit import assert_state_matches_cluster
from tests.support.names import stem

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def session_pids(session: int) -> list[int]:
    """Processes still in the session the killed `pulumi up` led (its plugins)."""
    listing = subprocess.run(["ps", "-o", "pid=", "-s", str(session)], capture_output=True, text=True).stdout
    return [int(pid) for pid in listing.split()]


def finish_pod(cluster, pod, namespace: str) -> None:
    """The download finishes while nobody watches: the puller pod exits 0."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {
        "phase": "Succeeded",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
        "containerStatuses": [{"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0,
                               "started": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                                          "startedAt": now, "finishedAt": now}}}
                              for c in pod.spec.containers],
    }})


def test_killed_up_recovers_with_the_documented_procedure(fault_project, cluster):
    project = fault_project(lambda ns: stack_config(ns, [small_model("tiny")]))
    ns = project.namespace
    # The puller runs (Running, never done) until the test says otherwise: the gate keeps waiting.
    stall = cluster.inject(ns, "unready", component="weights-puller")
    log = open(project.root / "killed-up.log", "w")
    up = subprocess.Popen(project.command("up", "--yes", "--skip-preview"), cwd=project.root, env=project.env,
                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    orphans: list[int] = []
    try:
        def running_puller():
            if ns not in {n.metadata.name for n in cluster.core.list_namespace().items}:
                return None
            pods = cluster.core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=weights-puller").items
            return next((p for p in pods if p.status.phase == "Running"), None)

        pod = cluster.wait("the puller to run", running_puller, timeout=90)
        time.sleep(2)  # the gate is polling the Job now
        assert re.search(r"tiny-weights-gate-[0-9a-f]{8} creating", (project.root / "killed-up.log").read_text())
        os.kill(up.pid, signal.SIGKILL)
        up.wait()
        time.sleep(1)
        orphans = [pid for pid in session_pids(up.pid) if pid != up.pid]
        print(f"\n(d) after SIGKILL: {len(orphans)} plugin process(es) of the killed engine still running")

        # What the kill left: the lock, and the gate's create as a pending operation.
        pending = project.pending_operations()
        assert [(op["type"], stem(op["resource"]["urn"].split("::")[-1])) for op in pending] == [
            ("creating", "tiny-weights-gate")]
        locked = project.timed("up", "--yes", "--skip-preview")
        assert locked.returncode != 0 and "the stack is currently locked" in locked.output, locked.output[-3000:]

        cluster.remove_fault(stall)
        finish_pod(cluster, pod, ns)
        job_name = pod.metadata.labels["batch.kubernetes.io/job-name"]
        job_uid = cluster.wait("the Job to complete", lambda: (
            (job := cluster.read("job", job_name, ns)) and (job.status.succeeded or 0) >= 1 and job.metadata.uid))

        started = time.monotonic()
        outputs = [project.timed("cancel", "--yes"),
                   project.timed("refresh", "--yes", "--clear-pending-creates"),
                   project.timed("up", "--yes", "--skip-preview")]
        print(f"(d) cancel + refresh + up: {time.monotonic() - started:.1f} s")
        for step in outputs:
            assert step.returncode == 0, step.output[-5000:]
            assert "already exists" not in step.output
        assert project.pending_operations() == []

        status = project.outputs()["models"]["tiny"]["status"]
        assert status["state"] == "READY", status
        objects = project.outputs()["models"]["tiny"]["objects"]
        assert objects["puller"] == job_name
        assert cluster.names(ns) == {"pvc": [objects["weights"]], "job": [job_name],
                                     "deployment": ["tiny"], "service": ["tiny"]}
        assert cluster.read("job", job_name, ns).metadata.uid == job_uid  # no re-pull
        replica_sets = cluster.apps.list_namespaced_replica_set(ns).items
        assert len(replica_sets) == 1, [r.metadata.name for r in replica_sets]
        assert_state_matches_cluster(project, cluster)
        project.run("preview", "--expect-no-changes")
    finally:
        log.close()
        if up.poll() is None:
            up.kill()
        # The killed engine's plugins do not notice it is gone (the dynamic-provider host would poll
        # until the pull deadline): end them, by pid; they are this test's.
        for pid in session_pids(up.pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
