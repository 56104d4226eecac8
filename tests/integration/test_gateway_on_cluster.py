"""A router deployed by the program before the gateway existed (main at 5fab70f) keeps serving
while this program adds the gateway in front of it, on the real engine and the simulated cluster:
- the preview creates the gateway's objects and changes none of the router's objects (its targets
  record re-reads once: the model's status record it follows updates);
- `up` leaves the router's Deployment and Service as they were (same uid, same generation, same
  ClusterIP: its clients keep their address) and brings the gateway up beside it, with the
  security settings every workload of ours has, as the API server stores them.
"""

from __future__ import annotations

import pytest

from testkit.harness import small_model, stack_config

pytestmark = pytest.mark.integration

BASELINE = "5fab70f"  # main just before the gateway
ROUTER = "llm-router"
GATEWAY = f"{ROUTER}-gateway"
ROUTER_IMAGE = "registry.example.com/llm/request-router:0.16.2"
PYLON_IMAGE = "registry.example.com/llm/stargate-client:0.4.0"


def router(**extra) -> dict:
    return {"name": ROUTER, "image": ROUTER_IMAGE, "workerAuth": {"mode": "open"},
            "pylon": {"image": PYLON_IMAGE, "resources": {"cpu": "50m", "memory": "64Mi"}}, **extra}


def config(namespace: str, section: dict) -> dict:
    return {**stack_config(namespace, [small_model()]), "router": section}


@pytest.fixture(scope="module")
def baseline(make_project, kube):
    project = make_project(lambda ns: config(ns, router()))
    project.use_program(BASELINE)
    project.up()
    apps, core = kube.AppsV1Api(), kube.CoreV1Api()
    before = {"deployment": apps.read_namespaced_deployment(ROUTER, project.namespace),
              "service": core.read_namespaced_service(ROUTER, project.namespace)}
    project.use_program()
    project.write_config(config(project.namespace, router(gateway={"replicas": 2})))
    return project, before


def child_ops(steps: list[dict]) -> dict[str, set[str]]:
    ops: dict[str, set[str]] = {}
    for step in steps:
        name = step["urn"].split("::")[-1]
        if name.startswith(f"{ROUTER}-"):
            ops.setdefault(name, set()).add(step["op"])
    return ops


def test_the_preview_creates_the_gateway_and_changes_nothing_of_the_router(baseline):
    project, _ = baseline
    ops = child_ops(project.preview_steps())
    gateway = {name: found for name, found in ops.items() if name.startswith(GATEWAY)}
    assert gateway == {f"{GATEWAY}-config": {"create"}, GATEWAY: {"create"}, f"{GATEWAY}-service": {"create"},
                       f"{GATEWAY}-pdb": {"create"}}, gateway
    changed = {name: found for name, found in ops.items()
               if not name.startswith(GATEWAY) and found - {"same", "read", "refresh"}}
    # The one change of the router's: its targets record (no cluster object) re-reads, because the
    # model's status record it is fed by updates once (the puller Job's new name since 5fab70f,
    # docs/09-upgrading.md). Its Deployment and Service are not touched.
    assert changed == {f"{ROUTER}-targets": {"update"}}, changed


def test_up_keeps_the_router_as_it_was_and_runs_the_gateway_beside_it(baseline, kube):
    project, before = baseline
    project.up()
    apps, core = kube.AppsV1Api(), kube.CoreV1Api()
    deployment = apps.read_namespaced_deployment(ROUTER, project.namespace)
    service = core.read_namespaced_service(ROUTER, project.namespace)
    assert deployment.metadata.uid == before["deployment"].metadata.uid
    assert deployment.metadata.generation == before["deployment"].metadata.generation  # not rolled
    assert service.metadata.uid == before["service"].metadata.uid
    assert service.spec.cluster_ip == before["service"].spec.cluster_ip

    gateway = apps.read_namespaced_deployment(GATEWAY, project.namespace)
    assert gateway.status.ready_replicas == 2
    pod = gateway.spec.template.spec
    (container,) = pod.containers
    assert container.image == "docker.io/library/nginx:1.26.3"
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.run_as_non_root is True and container.security_context.run_as_user == 101
    assert container.security_context.capabilities.drop == ["ALL"]
    assert container.readiness_probe.http_get.path == "/healthz"
    config_map = core.read_namespaced_config_map(f"{GATEWAY}-config", project.namespace)
    # The router by its fully qualified name, resolved per request (resolver.py).
    assert f"default {ROUTER}.{project.namespace}.svc.cluster.local:8000;" in config_map.data["nginx.conf"]
    assert core.read_namespaced_service(GATEWAY, project.namespace).spec.ports[0].port == 8000
    assert kube.PolicyV1Api().read_namespaced_pod_disruption_budget(GATEWAY, project.namespace).spec.max_unavailable == 1

    outputs = project.outputs()["router"]
    assert outputs["endpoint_url"] == f"http://{GATEWAY}.{project.namespace}.svc.cluster.local:8000"
    assert outputs["router_url"] == f"http://{ROUTER}.{project.namespace}.svc.cluster.local:8000"


def test_a_second_up_changes_nothing(baseline):
    project, _ = baseline
    result = project.run("preview", "--expect-no-changes", check=False)
    assert result.returncode == 0, f"the preview plans changes:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
