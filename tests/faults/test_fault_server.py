"""(b) The server does not come up: `pulumi up` fails with the classified reason, not an await
timeout, and the live status says the same.

One stack, two models, one `up`:
- ``crashy``: its server pods crash-loop (KWOK `crashloop`, through an admission policy) →
  reason crash-loop, within seconds of the pod's creation;
- ``greedy``: asks for 16 GPUs on nodes of 8 (validation cannot know the node size) → Pending →
  after platform.pendingTimeoutSeconds (10 s here) reason insufficient-gpus, quoting the scheduler.
Then the fix (the crash cause goes, greedy asks for 1 GPU) converges in place.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testkit.harness import REPO, small_model, stack_config

pytestmark = [pytest.mark.integration, pytest.mark.faults]

PENDING_TIMEOUT = 10


def models(greedy_gpus: int, crashy_args: tuple[str, ...] = ()) -> list[dict]:
    return [small_model("crashy", args=list(crashy_args)), small_model("greedy", gpus=greedy_gpus)]


def waited(result, model: str) -> float:
    """Seconds the model's status waited before `up` reported its failure."""
    started = result.at(rf"ModelStatus {model}-status creating \(0s\)")
    return result.at(rf"ModelStatus {model}-status \*\*creating failed\*\*") - started


@pytest.fixture(scope="module")
def scene(fault_project, cluster):
    project = fault_project(lambda ns: stack_config(ns, models(16), pendingTimeoutSeconds=PENDING_TIMEOUT))
    crash = cluster.inject(project.namespace, "crashloop", component="server", model="crashy")
    # --continue-on-error: the crash loop fails fast and must not stop the other model from being
    # created (the engine otherwise ends the update at the first failed resource).
    failed = project.timed("up", "--yes", "--skip-preview", "--continue-on-error")
    print(f"\n(b) failing `pulumi up`: {failed.seconds:.1f} s")
    return {"project": project, "failed": failed, "crash": crash}


def test_crash_loop_fails_up_with_its_reason_quickly(scene):
    out = scene["failed"].output
    assert scene["failed"].returncode != 0
    assert "model crashy is ERROR: the model server in pod crashy-" in out, out[-6000:]
    assert "reason: crash-loop" in out
    assert "keeps crashing (exit code 1)" in out
    # The reason is the whole story: no provider-host traceback in front of it.
    assert "Traceback" not in out and "error: providers.status.ModelNotServing: model crashy is ERROR" in out
    seconds = waited(scene["failed"], "crashy")
    print(f"(b) crash loop reported after {seconds:.0f} s of waiting")
    assert seconds <= 30


def test_unschedulable_fails_up_as_insufficient_gpus_after_the_pending_timeout(scene):
    out = scene["failed"].output
    assert "model greedy is ERROR: pod greedy-" in out, out[-6000:]
    assert "reason: insufficient-gpus" in out
    assert "Insufficient nvidia.com/gpu" in out  # the scheduler's own words
    seconds = waited(scene["failed"], "greedy")
    print(f"(b) pending reported after {seconds:.0f} s of waiting")
    # The pending clock starts at the pod's creation, a moment before the status starts waiting.
    assert PENDING_TIMEOUT - 5 <= seconds <= PENDING_TIMEOUT + 30
    assert "not serving after" not in out  # never the generic timeout


def test_the_live_status_says_the_same(scene):
    project = scene["project"]
    result = subprocess.run([sys.executable, "-m", "components", "status", "--config", str(project.config_file),
                             "--json"], cwd=REPO, env=project.env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr  # not every model is READY
    report = json.loads(result.stdout)
    assert (report["crashy"]["state"], report["crashy"]["reason"]) == ("ERROR", "crash-loop"), report["crashy"]
    assert (report["greedy"]["state"], report["greedy"]["reason"]) == ("ERROR", "insufficient-gpus"), report["greedy"]


def test_fixing_the_causes_converges_in_place(scene, cluster):
    project = scene["project"]
    cluster.remove_fault(scene["crash"])
    # A config change rolls the crashing pods (what fixing the cause looks like), greedy fits a node.
    project.write_config(stack_config(project.namespace, models(1, ("--max-model-len", "2048")),
                                      pendingTimeoutSeconds=PENDING_TIMEOUT))
    fixed = project.timed("up", "--yes", "--skip-preview")
    print(f"(b) converging `pulumi up`: {fixed.seconds:.1f} s")
    assert fixed.returncode == 0, fixed.output[-6000:]
    outputs = project.outputs()["models"]
    assert {m: outputs[m]["status"]["state"] for m in outputs} == {"crashy": "READY", "greedy": "READY"}
