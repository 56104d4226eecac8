"""(b2) Transient is not fatal (issue 15 item 7): a definitive cause still fails `pulumi up` fast,
a transient one is waited out.

Two stacks, one `up` each (KWOK stages of scripts/cluster/stages/30-pod-faults.yaml, put on the
pods through an admission policy, as in test_fault_server.py):
- ``badimage``: its server pods wait in ErrImagePull with containerd's `<image>: not found`
  (`image-not-found`) → `up` fails within 30 s with reason image-pull, quoting the runtime;
  ``badpuller``, in the same `up`: its puller pod waits the same way → its weights gate fails
  within 30 s (the Job itself would only fail at its deadline);
- ``slowpull``: ErrImagePull with `dial tcp …: i/o timeout` for 8 s, then Running and Ready
  (`image-timeout`), and ``flaky``: one restart in CrashLoopBackOff for 8 s, then Ready
  (`restart-once`) → `up` succeeds, after waiting through both.
Before this change the first read of either fault failed the `up`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from testkit.harness import REPO, small_model, stack_config

pytestmark = [pytest.mark.integration, pytest.mark.faults]

STAGES_FILE = Path(REPO) / "scripts" / "cluster" / "stages" / "30-pod-faults.yaml"
STAGES = ("llm-serving-pod-fault-image-not-found", "llm-serving-pod-fault-image-timeout",
          "llm-serving-pod-fault-restart-once", "llm-serving-pod-fault-recovers")
FAULT_SECONDS = 8  # how long the KWOK stages hold a recoverable fault
FAIL_FAST = 30


def apply_stages(cluster, names=STAGES) -> None:
    """Create or replace this file's Stages: a cluster started before they were added still runs
    them (Stages are matched by the fault annotation's value: the other faults are untouched)."""
    from kubernetes.client.exceptions import ApiException

    group = ("kwok.x-k8s.io", "v1alpha1", "stages")
    for stage in yaml.safe_load_all(STAGES_FILE.read_text()):
        if not stage or stage["metadata"]["name"] not in names:
            continue
        try:
            cluster.custom.create_cluster_custom_object(*group, stage)
        except ApiException as error:
            if error.status != 409:
                raise
            live = cluster.custom.get_cluster_custom_object(*group, stage["metadata"]["name"])
            stage["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            cluster.custom.replace_cluster_custom_object(*group, stage["metadata"]["name"], stage)


def status_seconds(result, model: str) -> float:
    """Seconds the model's status resource took, as the engine reports them."""
    match = re.search(rf"ModelStatus {model}-status (?:\*\*)?(?:created|creating failed)(?:\*\*)? \((\d+)s\)",
                      result.output)
    assert match, result.output[-4000:]
    return float(match.group(1))


@pytest.fixture(scope="module")
def stages(cluster):
    apply_stages(cluster)


@pytest.fixture(scope="module")
def definitive(fault_project, cluster, stages):
    project = fault_project(lambda ns: stack_config(ns, [small_model("badimage"), small_model("badpuller")]))
    cluster.inject(project.namespace, "image-not-found", component="server", model="badimage")
    cluster.inject(project.namespace, "image-not-found", component="weights-puller", model="badpuller")
    # Each failure is checked on its own: the first one must not keep the other from starting.
    failed = project.timed("up", "--yes", "--skip-preview", "--continue-on-error")
    print(f"\n(b2) failing `pulumi up`: {failed.seconds:.1f} s")
    return failed


@pytest.fixture(scope="module")
def transient(fault_project, cluster, stages):
    project = fault_project(lambda ns: stack_config(ns, [small_model("slowpull"), small_model("flaky")]))
    cluster.inject(project.namespace, "image-timeout", component="server", model="slowpull")
    cluster.inject(project.namespace, "restart-once", component="server", model="flaky")
    result = project.timed("up", "--yes", "--skip-preview")
    print(f"\n(b2) `pulumi up` through transient faults: {result.seconds:.1f} s")
    return {"project": project, "result": result}


def test_a_definitive_pull_failure_fails_up_fast_with_its_reason(definitive) -> None:
    out = definitive.output
    assert definitive.returncode != 0
    assert "model badimage is ERROR: pod badimage-" in out, out[-6000:]
    assert "reason: image-pull" in out
    assert ": not found (simulated by kwok)" in out  # the runtime's own words
    assert "tag or digest" in out  # what to do
    assert "Traceback" not in out
    started = definitive.at(r"ModelStatus badimage-status creating \(0s\)")
    seconds = definitive.at(r"ModelStatus badimage-status \*\*creating failed\*\*") - started
    print(f"(b2) definitive pull failure reported after {seconds:.0f} s of waiting")
    assert seconds <= FAIL_FAST


def test_a_puller_that_can_never_start_fails_its_gate_fast(definitive) -> None:
    out = definitive.output
    assert "model badpuller: the puller pod badpuller-" in out, out[-6000:]
    assert "reason: image-not-found" in out and "tag or digest" in out
    started = definitive.at(r"WeightsGate badpuller-weights-gate-[0-9a-f]{8} creating \(0s\)")
    seconds = definitive.at(r"WeightsGate badpuller-weights-gate-[0-9a-f]{8} \*\*creating failed\*\*") - started
    print(f"(b2) puller that cannot start reported after {seconds:.0f} s of waiting")
    assert seconds <= FAIL_FAST


def test_a_transient_pull_and_a_restart_that_recover_let_up_succeed(transient, cluster) -> None:
    result, project = transient["result"], transient["project"]
    assert result.returncode == 0, result.output[-6000:]
    states = {name: model["status"]["state"] for name, model in project.outputs()["models"].items()}
    assert states == {"slowpull": "READY", "flaky": "READY"}
    # The status waited through the faults (the first read saw them), instead of failing on them.
    for model in ("slowpull", "flaky"):
        assert status_seconds(result, model) >= FAULT_SECONDS - 3, model
    pods = cluster.core.list_namespaced_pod(project.namespace, label_selector="llm-serving.dev/model=flaky").items
    servers = [p for p in pods if (p.metadata.labels or {}).get("app.kubernetes.io/component") == "server"]
    assert servers and all(s.restart_count == 1 for p in servers for s in p.status.container_statuses)
