"""(g) The puller Job's pod template changes while the old Job is slow to go: the replacement
neither waits for it nor lands on it (issue 33, item 5).

A finalizer of someone else's holds the old Job once its delete is asked for, as a foreground
delete holds it while the garbage collector takes its pods, or as any controller's finalizer does.
The provider does not await the delete (skipAwait): the new Job is created at once. Under one
name for one source (the naming before common.puller_name) that create met the old Job and
failed, a server-side-apply conflict on the puller's args (the cluster tier in CI, upgrading a
stack of an older program). Under a name of its own:
- `pulumi up` with a new puller image succeeds; the new Job completes and the model is READY;
- the old Job stands, marked for deletion, until its finalizer goes, then it is gone;
- nothing is left to change.
"""

from __future__ import annotations

import pytest

from testkit.harness import small_model, stack_config

pytestmark = [pytest.mark.integration, pytest.mark.faults]

HOLD = "llm-serving.dev/test-hold"  # nobody's controller: only this test removes it
NEXT_PULLER = "docker.io/vllm/vllm-openai:v0.11.1"  # any other template (KWOK runs no image)


def hold(cluster, name: str, namespace: str) -> None:
    # A JSON patch: a merge patch of a finalizer list merges (strategic) or needs the whole list.
    cluster.batch.patch_namespaced_job(name, namespace, [{"op": "add", "path": "/metadata/finalizers", "value": [HOLD]}],
                                       _content_type="application/json-patch+json")


def release(cluster, name: str, namespace: str) -> None:
    job = cluster.read("job", name, namespace)
    if job is not None and HOLD in (job.metadata.finalizers or []):
        cluster.batch.patch_namespaced_job(name, namespace, [
            {"op": "test", "path": "/metadata/finalizers", "value": [HOLD]},
            {"op": "remove", "path": "/metadata/finalizers"}], _content_type="application/json-patch+json")


def test_a_new_puller_template_replaces_a_job_that_is_slow_to_go(fault_project, cluster):
    project = fault_project(lambda ns: stack_config(ns, [small_model("race")]))
    project.up()
    ns = project.namespace
    old = project.outputs()["models"]["race"]["objects"]["puller"]
    hold(cluster, old, ns)
    try:
        project.write_config(stack_config(ns, [small_model("race")], pullerImage=NEXT_PULLER))
        replaced = project.timed("up", "--yes", "--skip-preview")
        assert replaced.returncode == 0, replaced.output[-6000:]
        outputs = project.outputs()["models"]["race"]
        new = outputs["objects"]["puller"]
        assert new != old
        assert outputs["status"]["state"] == "READY", outputs["status"]
        job = cluster.read("job", new, ns)
        assert job.status.succeeded == 1
        assert job.spec.template.spec.containers[0].image == NEXT_PULLER
        held = cluster.read("job", old, ns)
        assert held is not None and held.metadata.deletion_timestamp is not None, held
    finally:
        release(cluster, old, ns)
    cluster.wait(f"the old Job {old} to be gone", lambda: cluster.read("job", old, ns) is None, timeout=90)
    project.run("preview", "--expect-no-changes")
