"""A router deployed by the baseline program (main at 8485478: port 8080, /health probes, invented
env) is taken over by this render (llm-request-router chart 0.16.2: ports 8000/50071/50072/9090,
/readyz and /healthz, flags) without stranding it (issue 17 item 4), on the real engine and the
simulated cluster:
- the preview shows updates and creates only: no replacement and no delete of the router's
  workload or Services;
- `up` rolls the same Deployment (same uid, a new ReplicaSet, maxUnavailable 0) and patches the
  same Service;
- the router section of the shipped local stack ends up running, and the live Deployment carries
  the chart's probe paths (KWOK marks pods ready whatever the probes say, so the paths are read
  from the object the API server stores).
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from testkit.harness import REPO, small_model, stack_config
from tests.support.local_stack import router_off_the_real_node

pytestmark = pytest.mark.integration

BASELINE = "8485478"
ROUTER = "llm-router"
CHILD = f"{ROUTER}-"  # logical names of the router's children start with the router's name


def router_section(source: str) -> dict:
    """The router section of the local stack file, at ``source`` (a commit) or in the worktree."""
    text = (subprocess.run(["git", "-C", str(REPO), "show", f"{source}:stacks/Pulumi.local.yaml"],
                           capture_output=True, text=True, check=True).stdout
            if source != "worktree" else (REPO / "stacks" / "Pulumi.local.yaml").read_text())
    router = yaml.safe_load(text)["config"]["llm-serving:router"]
    # The local stack now places the router and gateway on the real node; this module runs on
    # the default simulated cluster, which has none (tests/support/local_stack.py).
    return router_off_the_real_node(router)


def config(namespace: str, router: dict) -> dict:
    return {**stack_config(namespace, [small_model()]), "router": router}


@pytest.fixture(scope="module")
def baseline(make_project, kube):
    project = make_project(lambda ns: config(ns, router_section(BASELINE)))
    project.use_program(BASELINE)
    project.up()
    apps, core = kube.AppsV1Api(), kube.CoreV1Api()
    before = {
        "deployment": apps.read_namespaced_deployment(ROUTER, project.namespace),
        "service": core.read_namespaced_service(ROUTER, project.namespace),
    }
    # The baseline render, as the cluster stores it: what the new code has to take over.
    assert before["deployment"].spec.template.spec.containers[0].ports[0].container_port == 8080
    project.use_program()
    project.write_config(config(project.namespace, router_section("worktree")))
    return project, before


def router_steps(steps: list[dict]) -> dict[str, set[str]]:
    ops: dict[str, set[str]] = {}
    for step in steps:
        name = step["urn"].split("::")[-1]
        if name.startswith(CHILD):
            ops.setdefault(name, set()).add(step["op"])
    return ops


def test_the_preview_updates_in_place_and_replaces_nothing(baseline):
    project, _ = baseline
    ops = router_steps(project.preview_steps())
    assert ops[f"{ROUTER}-workload"] == {"update"}, ops
    assert ops[f"{ROUTER}-service"] == {"update"}, ops
    assert ops[f"{ROUTER}-headless-service"] == {"create"}, ops
    destructive = {name: found for name, found in ops.items()
                   if found & {"replace", "create-replacement", "delete-replaced", "delete"}}
    assert destructive == {}, destructive


def test_up_rolls_the_same_deployment_and_patches_the_same_service(baseline, kube):
    project, before = baseline
    project.up()
    apps, core = kube.AppsV1Api(), kube.CoreV1Api()
    deployment = apps.read_namespaced_deployment(ROUTER, project.namespace)
    service = core.read_namespaced_service(ROUTER, project.namespace)
    assert deployment.metadata.uid == before["deployment"].metadata.uid  # never deleted
    assert service.metadata.uid == before["service"].metadata.uid
    assert service.spec.cluster_ip == before["service"].spec.cluster_ip  # clients' address kept
    # Rolled: the surge-first strategy, a newer generation, one ReplicaSet per template.
    rolling = deployment.spec.strategy.rolling_update
    assert (str(rolling.max_surge), str(rolling.max_unavailable)) == ("1", "0")
    assert deployment.metadata.generation > before["deployment"].metadata.generation
    assert deployment.status.updated_replicas == deployment.status.ready_replicas == 1
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    replica_sets = apps.list_namespaced_replica_set(project.namespace, label_selector=selector).items
    assert len(replica_sets) == 2
    assert sorted(rs.spec.replicas for rs in replica_sets) == [0, 1]
    assert {p.name: p.port for p in service.spec.ports} == {"http": 8000, "grpc": 50071, "quic": 50072,
                                                           "metrics": 9090}


def test_the_local_stacks_router_runs_with_the_charts_probes(baseline, kube):
    project, _ = baseline
    deployment = kube.AppsV1Api().read_namespaced_deployment(ROUTER, project.namespace)
    assert deployment.status.ready_replicas == 1
    pod = deployment.spec.template.spec
    (container,) = pod.containers
    assert (container.readiness_probe.http_get.path, container.readiness_probe.http_get.port) == ("/readyz", "http")
    assert (container.liveness_probe.http_get.path, container.liveness_probe.http_get.port) == ("/healthz", "http")
    assert {p.name: (p.container_port, p.protocol) for p in container.ports} == {
        "http": (8000, "TCP"), "grpc": (50071, "TCP"), "metrics": (9090, "TCP"), "reverse": (50072, "UDP")}
    assert "--http-listen-addr=0.0.0.0:8000" in container.args and "--disable-dns-discovery" in container.args
    assert [e.name for e in container.env] == ["POD_NAME", "POD_NAMESPACE", "POD_IP"]
    assert pod.enable_service_links is False
    assert pod.termination_grace_period_seconds == 35
    headless = kube.CoreV1Api().read_namespaced_service(f"{ROUTER}-headless", project.namespace)
    assert headless.spec.cluster_ip == "None" and headless.spec.publish_not_ready_addresses is True
    outputs = project.outputs()["router"]
    assert outputs["topology"] == "single-deployment"
    assert outputs["router_url"] == f"http://{ROUTER}.{project.namespace}.svc.cluster.local:8000"
    # Clients call the gateway the local stack puts in front of it (docs/gateway.md).
    assert outputs["endpoint_url"] == f"http://{ROUTER}-gateway.{project.namespace}.svc.cluster.local:8000"


def test_a_second_up_changes_nothing(baseline):
    project, _ = baseline
    result = project.run("preview", "--expect-no-changes", check=False)
    assert result.returncode == 0, f"the preview plans changes:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
