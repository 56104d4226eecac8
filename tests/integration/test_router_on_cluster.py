"""The request router in front of a model on the real engine and the simulated cluster (issue 6):
the targets it reports are the model's ready pods, scaling the model changes them, and an
install pinned to StatefulSet stays one (no diff) until a migration is acknowledged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testkit.harness import REPO, small_model, stack_config

pytestmark = pytest.mark.integration

ROUTER_IMAGE = "registry.example.com/llm/request-router:0.16.2"
PYLON_IMAGE = "registry.example.com/llm/stargate-client:0.4.0"


def model(replicas: int) -> dict:
    # ReadWriteMany: several replicas share one weights volume.
    return small_model(replicas=replicas, weights={"size": "1Gi", "accessMode": "ReadWriteMany"})


def config(namespace: str, replicas: int = 1, kind: str | None = "StatefulSet", migrate_from: str | None = None) -> dict:
    workload = {k: v for k, v in (("kind", kind), ("migrateFrom", migrate_from)) if v}
    # The pylon registers the model with the router: without it nothing is reachable.
    router = {"name": "edge", "image": ROUTER_IMAGE,
              "pylon": {"image": PYLON_IMAGE, "resources": {"cpu": "50m", "memory": "64Mi"}},
              "workerAuth": {"mode": "open"}}
    if workload:
        router["workload"] = workload
    return {**stack_config(namespace, [model(replicas)]), "router": router}


@pytest.fixture(scope="module")
def deployed(make_project):
    # An install first deployed as a StatefulSet (the old default) and pinned to it.
    project = make_project(lambda ns: config(ns))
    project.up()
    return project


def ready_pods(kube, namespace: str, model_name: str) -> list[str]:
    pods = kube.CoreV1Api().list_namespaced_pod(namespace, label_selector=f"llm-serving.dev/model={model_name}")
    return sorted(
        p.metadata.name for p in pods.items
        if p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
    )


def cli_targets(project) -> tuple[int, dict]:
    result = subprocess.run(
        [sys.executable, "-m", "components", "targets", "--config", str(project.config_file), "--json"],
        cwd=REPO, env=project.env, capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 3), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_reported_targets_are_the_models_ready_pods(deployed, kube):
    targets = deployed.outputs()["router"]["targets"]
    pods = ready_pods(kube, deployed.namespace, "tiny")
    assert len(pods) == 1
    assert targets["models"] == {"tiny": pods}
    # The router pods, read from the headless Service as the backend router reads them.
    assert targets["routers"] == ["edge-0"]
    code, live = cli_targets(deployed)
    assert code == 0
    assert live["routers"] == ["edge-0"] and live["topology"].startswith("StatefulSet")
    assert (live["models"], live["revision"]) == (targets["models"], targets["revision"])


def test_the_router_runs_as_the_pinned_statefulset(deployed, kube):
    router = deployed.outputs()["router"]
    assert router["workload_kind"] == "StatefulSet"
    workload = kube.AppsV1Api().read_namespaced_stateful_set("edge", deployed.namespace)
    assert workload.status.ready_replicas == 1
    assert workload.spec.service_name == router["objects"]["headless_service"]
    assert router["topology"] == "statefulset-dns"
    # The chart's probes, as the API server stores them (KWOK marks pods ready regardless).
    (container,) = workload.spec.template.spec.containers
    assert container.readiness_probe.http_get.path == "/readyz"
    assert container.liveness_probe.http_get.path == "/healthz"


def test_the_pin_holds_with_no_diff(deployed):
    result = deployed.run("preview", "--expect-no-changes", check=False)
    assert result.returncode == 0, f"the preview plans changes:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"


def test_dropping_the_pin_stops_the_preview_instead_of_flipping_the_kind(deployed):
    # With `kind` unset the default (Deployment) applies: a default must never flip an install.
    with deployed.config_for_now(config(deployed.namespace, kind=None)):
        result = deployed.run("preview", check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "StatefulSet" in output and "migrateFrom" in output, output[-3000:]


def test_an_acknowledged_migration_shows_the_create_and_the_delete(deployed):
    with deployed.config_for_now(config(deployed.namespace, kind="Deployment", migrate_from="StatefulSet")):
        steps = deployed.preview_steps()
    workload_ops = {(s["op"], s["urn"].split("::")[-2].split("$")[-1]) for s in steps
                    if s["urn"].endswith("::edge-workload")}
    assert ("create", "kubernetes:apps/v1:Deployment") in workload_ops, workload_ops
    assert ("delete", "kubernetes:apps/v1:StatefulSet") in workload_ops, workload_ops


def test_tls_without_cert_manager_stops_the_preview_with_the_fix(deployed):
    # The simulated cluster has no cert-manager: the preview says so, not an `up` half-way.
    with_tls = config(deployed.namespace)
    with_tls["router"]["tls"] = {"enabled": True, "dnsNames": [f"edge.{deployed.namespace}.svc.cluster.local"],
                                 "allowedDomains": [f"{deployed.namespace}.svc.cluster.local"]}
    with deployed.config_for_now(with_tls):
        result = deployed.run("preview", check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "router.tls needs issuers.cert-manager.io, certificates.cert-manager.io, missing on this cluster" in output, \
        output[-3000:]
    assert "router.tls.enabled: false" in output


def test_scaling_the_model_changes_the_targets(deployed, kube):
    before = deployed.outputs()["router"]["targets"]
    deployed.write_config(config(deployed.namespace, replicas=2))
    deployed.up()
    after = deployed.outputs()["router"]["targets"]
    pods = ready_pods(kube, deployed.namespace, "tiny")
    assert len(pods) == 2
    assert after["models"] == {"tiny": pods}
    assert after["revision"] != before["revision"]
    # Scaled outside Pulumi: the live view follows at once, the stack state on `pulumi refresh`.
    kube.AppsV1Api().patch_namespaced_deployment_scale("tiny", deployed.namespace, {"spec": {"replicas": 1}})
    live = {}
    for _ in range(60):
        code, live = cli_targets(deployed)
        if len(live["models"]["tiny"]) == 1:
            break
        subprocess.run(["sleep", "1"])
    assert live["models"]["tiny"] == ready_pods(kube, deployed.namespace, "tiny")
    assert len(live["models"]["tiny"]) == 1
    deployed.run("refresh", "--yes")
    assert recorded_targets(deployed)["models"] == live["models"]


def recorded_targets(project) -> dict:
    """The RouterTargets resource's outputs in the stack state (refresh updates resources; the
    stack outputs follow at the next `up`)."""
    state = json.loads(project.run("stack", "export").stdout)
    [resource] = [r for r in state["deployment"]["resources"] if r["type"].endswith(":RouterTargets")]
    return resource["outputs"]["targets"]
