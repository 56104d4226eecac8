"""(c) Kubernetes API faults during `pulumi up`, injected by a proxy in front of the apiserver
(tests/support/chaos_proxy.py) that the pulumi-kubernetes provider and our dynamic providers
(gate, status) both go through.

- Retryable faults (429 with Retry-After, 503 bursts, connections dropped before an answer, a
  5 s outage of the whole API while the gate waits) are retried within bounds: `up` succeeds,
  in bounded time, and what it reports is true (READY with a target, every object there).
- Faults no client may retry (a 409 conflict on a write, a write whose answer is lost after the
  apiserver acted on it) fail `up`. The state may then know less than the cluster (an object
  created but unrecorded), never more; the re-run converges: no "already exists", no changes left.
"""

from __future__ import annotations

import re

import pytest

from testkit.harness import small_model, stack_config
from tests.support.chaos_proxy import ChaosProxy, Drop, Respond, every, outage
from tests.support.fault_kit import assert_state_matches_cluster
from tests.support.names import stem

pytestmark = [pytest.mark.integration, pytest.mark.faults]

BOUND_SECONDS = 90  # a clean `up` of this stack takes ~15 s here


@pytest.fixture(scope="module")
def scene(fault_project, cluster, scratch):
    proxy = ChaosProxy(cluster.kubeconfig)
    project = fault_project(lambda ns: stack_config(ns, [small_model("alpha")]))
    project.env["KUBECONFIG"] = str(proxy.write_kubeconfig(scratch / "chaos.kubeconfig"))
    yield {"project": project, "proxy": proxy}
    proxy.close()


def test_retryable_faults_are_retried_within_bounds_and_up_converges(scene, cluster):
    project, proxy = scene["project"], scene["proxy"]
    # Two whole-API outages (every client gets 503 + Retry-After): one while the gate waits for the
    # puller, one from the Deployment's creation on, while the Service is created and the status
    # starts to wait.
    gate_outage = proxy.add(outage(5, Respond(503, retry_after=1),
                                   trigger=lambda r: r.agent == "python" and "/jobs/alpha-pull-" in r.path))
    serve_outage = proxy.add(outage(4, Respond(503, retry_after=1),
                                    trigger=lambda r: r.method == "PATCH" and "/deployments/alpha" in r.path))
    proxy.add(every(3, Respond(429, retry_after=1), agent="pulumi-kubernetes", limit=6))
    proxy.add(every(4, Drop(), agent="pulumi-kubernetes", methods={"GET"}, limit=3))
    proxy.add(every(4, Respond(503), agent="python", limit=4))
    proxy.add(every(5, Drop(), agent="python", limit=3))

    result = project.timed("up", "--yes", "--skip-preview")
    proxy.clear()
    faults = {agent: len(proxy.faults(agent)) for agent in ("pulumi-kubernetes", "python")}
    print(f"\n(c) `pulumi up` through {sum(faults.values())} injected faults {faults}: {result.seconds:.1f} s")
    assert result.returncode == 0, result.output[-6000:]
    assert result.seconds < BOUND_SECONDS
    assert gate_outage.state["until"] and serve_outage.state["until"], "an outage never started"
    kinds = {(r.agent, r.action) for r in proxy.faults()}
    assert kinds >= {("pulumi-kubernetes", "429"), ("pulumi-kubernetes", "drop-before"), ("pulumi-kubernetes", "503"),
                     ("python", "503"), ("python", "drop-before")}, kinds

    status = project.outputs()["models"]["alpha"]["status"]
    assert status["state"] == "READY" and status["targets"], status
    pods = cluster.core.list_namespaced_pod(project.namespace, label_selector="llm-serving.dev/model=alpha,"
                                            "app.kubernetes.io/component=server").items
    assert [p.metadata.name for p in pods] == status["targets"]  # READY is true, not a guess
    assert_state_matches_cluster(project, cluster)
    project.run("preview", "--expect-no-changes")


def test_unretryable_faults_fail_up_and_the_rerun_converges(scene, cluster):
    project, proxy = scene["project"], scene["proxy"]
    new_image = "docker.io/vllm/vllm-openai:v0.11.1"

    # 1. A new model's volume is created, but the answer is lost on the way back.
    project.write_config(stack_config(project.namespace, [small_model("alpha"), small_model("beta")]))
    proxy.add(every(1, Drop(after=True), agent="pulumi-kubernetes", methods={"PATCH"},
                    path_contains="/persistentvolumeclaims/beta-weights-", limit=1))
    lost = project.timed("up", "--yes", "--skip-preview")
    proxy.clear()
    print(f"(c) failing `pulumi up` (a lost answer): {lost.seconds:.1f} s")
    assert lost.returncode != 0
    # The volume's logical name carries its source's hash (compile/plan.py weights_names).
    assert re.search(r"beta-weights-[0-9a-f]{8} \*\*creating failed\*\*", lost.output), lost.output[-6000:]
    recorded = assert_state_matches_cluster(project, cluster)  # the state never claims more...
    assert "beta-weights" not in {stem(name) for name in recorded}  # ... but knows less: the volume exists, unrecorded
    assert any(n.startswith("beta-weights-") for n in cluster.names(project.namespace)["pvc"])
    assert "beta" not in project.outputs()["models"]  # nothing reported for beta

    # 2. An update meets a 409 conflict.
    project.write_config(stack_config(project.namespace, [small_model("alpha", image=new_image), small_model("beta")]))
    proxy.add(every(1, Respond(409), agent="pulumi-kubernetes", methods={"PATCH"},
                    path_contains="/deployments/alpha", limit=1))
    conflict = project.timed("up", "--yes", "--skip-preview")
    proxy.clear()
    print(f"(c) failing `pulumi up` (a 409 conflict): {conflict.seconds:.1f} s")
    assert conflict.returncode != 0
    assert "alpha-server **updating failed**" in conflict.output, conflict.output[-6000:]
    assert_state_matches_cluster(project, cluster)
    # The failed `up` did not record the new rollout as serving.
    status = next(r for r in project.resources() if r["urn"].endswith("::alpha-status"))
    server = next(r for r in project.resources() if r["urn"].endswith("::alpha-server"))
    assert server["inputs"]["spec"]["template"]["spec"]["containers"][0]["image"] != new_image
    assert status["outputs"]["state"] == "READY"  # still the record of the old, serving rollout

    # 3. Re-run: converges, adopting what the lost answer created; nothing left to do.
    rerun = project.timed("up", "--yes", "--skip-preview")
    print(f"(c) converging `pulumi up`: {rerun.seconds:.1f} s")
    assert rerun.returncode == 0, rerun.output[-6000:]
    assert "already exists" not in rerun.output
    outputs = project.outputs()["models"]
    assert {m: outputs[m]["status"]["state"] for m in outputs} == {"alpha": "READY", "beta": "READY"}
    deployment = cluster.read("deployment", "alpha", project.namespace)
    assert deployment.spec.template.spec.containers[0].image == new_image
    assert len(cluster.names(project.namespace)["pvc"]) == 2  # adopted, not duplicated
    assert_state_matches_cluster(project, cluster)
    project.run("preview", "--expect-no-changes")
