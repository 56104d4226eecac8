"""(a) The puller fails: `pulumi up` fails fast with the class and the log tail; fixing the cause
and re-running converges with no manual cleanup.

One stack, two models, both pullers failing at once (KWOK `fail` through an admission policy):
- ``badrev`` asks for a revision the hub does not have. Fix: a config change (the revision),
  which names new weights: Pulumi creates a new volume and puller and deletes the failed ones;
- ``flaky`` fails while the hub answers 503: nothing in its spec is wrong. Fix: the hub recovers
  (the policy goes), the config does not change. The failed Job has the same name and spec, so
  Pulumi has nothing to do for it: the gate re-runs a puller whose failure an earlier `up`
  reported (providers/gate.py), instead of finding the same failed Job forever.
KWOK pods have no logs: the chaos proxy serves what `hf download` prints in each case.
"""

from __future__ import annotations

import pytest

from testkit.harness import small_model, stack_config
from tests.support.chaos_proxy import ChaosProxy, fake_logs
from tests.support.names import stem

pytestmark = [pytest.mark.integration, pytest.mark.faults]

BAD_REVISION = "no-such-revision"
REVISION_LOG = (
    "Fetching 7 files:   0%|          | 0/7 [00:00<?, ?it/s]\n"
    "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. (Request ID: Root=1-6650a1b2-0c9f)\n\n"
    f"Revision Not Found for url: https://huggingface.co/api/models/acme/tiny-llm/revision/{BAD_REVISION}.\n"
    f"Invalid rev id: {BAD_REVISION}\n"
)
HUB_DOWN_LOG = ("huggingface_hub.errors.HfHubHTTPError: 503 Server Error: Service Unavailable for url: "
                "https://huggingface.co/api/models/acme/tiny-llm/revision/main\n")
# backoffLimit 2: three failed pods, 10 s and 20 s apart (the Job controller's back-off), ~35 s.
FAIL_FAST_SECONDS = 90


def models(revision: str) -> list[dict]:
    return [small_model("badrev", revision=revision), small_model("flaky")]


@pytest.fixture(scope="module")
def scene(fault_project, cluster, scratch):
    proxy = ChaosProxy(cluster.kubeconfig)
    proxy.add(fake_logs(REVISION_LOG, pod_prefix="badrev-pull-"))
    proxy.add(fake_logs(HUB_DOWN_LOG, pod_prefix="flaky-pull-"))
    project = fault_project(lambda ns: stack_config(ns, models(BAD_REVISION)))
    project.env["KUBECONFIG"] = str(proxy.write_kubeconfig(scratch / "proxy.kubeconfig"))
    revision_fault = cluster.inject(project.namespace, "fail", component="weights-puller", arg=BAD_REVISION)
    hub_fault = cluster.inject(project.namespace, "fail", component="weights-puller", model="flaky")
    failed = project.timed("up", "--yes", "--skip-preview")
    print(f"\n(a) failing `pulumi up`: {failed.seconds:.1f} s")
    yield {"project": project, "failed": failed, "proxy": proxy, "faults": (revision_fault, hub_fault)}
    proxy.close()


def test_up_fails_fast_with_the_class_and_the_log_tail(scene):
    failed = scene["failed"]
    assert failed.returncode != 0
    assert failed.seconds < FAIL_FAST_SECONDS, f"took {failed.seconds:.0f}s"
    out = failed.output
    assert "model badrev: revision not found in acme/tiny-llm; check source.revision" in out, out[-5000:]
    assert "reason: revision-not-found" in out
    assert f"Invalid rev id: {BAD_REVISION}" in out  # the log tail, quoted
    assert "model flaky: weights download failed (BackoffLimitExceeded)" in out
    assert "reason: puller-failed" in out
    assert "503 Server Error: Service Unavailable" in out
    assert "kept for its logs" in out


def test_after_the_failure_nothing_serves_and_the_failed_jobs_are_kept(scene, cluster):
    project = scene["project"]
    objects = cluster.names(project.namespace)
    assert objects["deployment"] == [] and objects["service"] == []  # the gates held serving back
    for name in objects["job"]:
        job = cluster.read("job", name, project.namespace)
        assert any(c.type == "Failed" and c.status == "True" for c in job.status.conditions or []), name
    states = {stem(name) for name in project.kube_objects_in_state()}
    assert not any(name.endswith("-weights-gate") for name in states)
    assert {"badrev-puller", "flaky-puller"} <= states


def test_fixing_the_cause_converges_without_manual_cleanup(scene, cluster):
    project = scene["project"]
    before = {name: cluster.read("job", name, project.namespace).metadata.uid
              for name in cluster.names(project.namespace)["job"]}
    flaky_job = next(name for name in before if name.startswith("flaky-"))
    for fault in scene["faults"]:
        cluster.remove_fault(fault)  # the hub is back
    project.write_config(stack_config(project.namespace, models("main")))  # the revision is fixed

    fixed = project.timed("up", "--yes", "--skip-preview")
    print(f"(a) converging `pulumi up`: {fixed.seconds:.1f} s")
    assert fixed.returncode == 0, fixed.output[-6000:]
    assert "already exists" not in fixed.output

    outputs = project.outputs()["models"]
    for model in ("badrev", "flaky"):
        assert outputs[model]["status"]["state"] == "READY", outputs[model]
    objects = cluster.names(project.namespace)
    # badrev: new weights under a new name; the failed volume and puller are gone.
    assert objects["job"] == sorted([outputs["badrev"]["objects"]["puller"], flaky_job])
    assert objects["pvc"] == sorted([outputs["badrev"]["objects"]["weights"], outputs["flaky"]["objects"]["weights"]])
    assert outputs["badrev"]["objects"]["puller"] not in before
    # flaky: the same Job, re-run by the gate (a new object under the same name), now complete.
    rerun = cluster.read("job", flaky_job, project.namespace)
    assert rerun.metadata.uid != before[flaky_job]
    assert rerun.status.succeeded == 1
    assert "llm-serving.dev/pull-failure-reported" not in (rerun.metadata.annotations or {})
    project.run("preview", "--expect-no-changes")


def test_the_rerun_job_is_still_pulumis_to_update(scene, cluster):
    """The gate re-applied the Job under Pulumi's field manager: a later in-place change of the Job
    (the pull deadline) applies without a field-manager conflict and does not re-pull."""
    project = scene["project"]
    job_name = project.outputs()["models"]["flaky"]["objects"]["puller"]
    uid = cluster.read("job", job_name, project.namespace).metadata.uid
    project.write_config(stack_config(project.namespace, models("main"), pullTimeoutSeconds=301))
    result = project.timed("up", "--yes", "--skip-preview")
    assert result.returncode == 0, result.output[-6000:]
    job = cluster.read("job", job_name, project.namespace)
    assert job.spec.active_deadline_seconds == 301
    assert job.metadata.uid == uid
