"""`pulumi up` / preview / destroy of a one-model stack under the real engine (issue 3); destroy
keeps the Namespace and the Secrets users created in it (issue 33)."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime

import pytest

from testkit.harness import small_model, stack_config
from tests.support.names import stem

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployed(make_project):
    project = make_project(lambda ns: stack_config(ns, [small_model()]))
    project.up()
    return project


def _time(value) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_up_serves_and_reports_ready(deployed):
    model = deployed.outputs()["models"]["tiny"]
    assert model["status"]["state"] == "READY", model
    assert model["status"]["targets"], "READY must mean at least one routable target"
    assert model["endpoint_url"] == f"http://tiny.{deployed.namespace}.svc.cluster.local:8000"


def test_deployment_created_only_after_the_puller_completed(deployed, kube):
    objects = deployed.outputs()["models"]["tiny"]["objects"]
    job = kube.BatchV1Api().read_namespaced_job(objects["puller"], deployed.namespace)
    deployment = kube.AppsV1Api().read_namespaced_deployment(objects["deployment"], deployed.namespace)
    assert job.status.completion_time is not None, "the puller Job must have completed"
    assert _time(deployment.metadata.creation_timestamp) >= _time(job.status.completion_time)


def test_hand_off_leaves_no_puller_pod_but_keeps_the_job(deployed, kube):
    objects = deployed.outputs()["models"]["tiny"]["objects"]
    pods = kube.CoreV1Api().list_namespaced_pod(
        deployed.namespace, label_selector=f"batch.kubernetes.io/job-name={objects['puller']}")
    assert pods.items == []
    assert kube.BatchV1Api().read_namespaced_job(objects["puller"], deployed.namespace)


def test_every_kubernetes_resource_uses_the_program_provider(deployed):
    # Pulumi.yaml disables the default Kubernetes provider; the state shows no resource on one.
    resources = json.loads(deployed.run("stack", "export").stdout)["deployment"]["resources"]
    providers = {r["urn"] for r in resources if r["type"] == "pulumi:providers:kubernetes"}
    assert [urn.rsplit("::", 1)[-1] for urn in providers] == ["cluster"]
    kube_objects = [r for r in resources if r["type"].startswith("kubernetes:")]
    assert kube_objects
    assert {r["provider"].rsplit("::", 1)[0] for r in kube_objects} == providers


def test_second_up_changes_nothing(deployed):
    result = deployed.run("preview", "--expect-no-changes", check=False)
    assert result.returncode == 0, f"the preview plans changes:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"


def _ops(steps: list[dict]) -> dict[str, set[str]]:
    by_name: dict[str, set[str]] = {}
    for step in steps:
        name = step["urn"].split("::")[-1]
        by_name.setdefault(name, set()).add(step["op"])
    return by_name


def test_image_change_updates_the_deployment_in_place(deployed):
    config = stack_config(deployed.namespace, [small_model(image="docker.io/vllm/vllm-openai:v0.11.1")])
    with deployed.config_for_now(config):
        ops = _ops(deployed.preview_steps())
    assert ops["tiny-server"] == {"update"}
    by_stem = {stem(n): o for n, o in ops.items()}
    for name in ("tiny-weights", "tiny-puller", "tiny-weights-gate"):
        assert by_stem.get(name, {"same"}) == {"same"}, (name, by_stem.get(name))
    changed = {n for n, o in ops.items() if o - {"same"}}
    # The status record re-checks the new rollout; nothing else moves.
    assert changed <= {"tiny-server", "tiny-status"}, changed


def test_revision_change_replaces_the_weights(deployed):
    config = stack_config(deployed.namespace, [small_model(revision="v2")])
    with deployed.config_for_now(config):
        steps = deployed.preview_steps()
    ops = _ops(steps)
    # Named after their source (compile/plan.py weights_names): the new ones are created, the old
    # ones deleted (after the server moved over: deletes come last).
    for name in ("tiny-weights", "tiny-puller", "tiny-weights-gate"):
        found = {n: o for n, o in ops.items() if stem(n) == name}
        assert sorted(found.values(), key=sorted) == [{"create"}, {"delete"}], (name, found)
    # The server rolls onto the new volume in place: no downtime from a replacement.
    assert ops["tiny-server"] == {"update"}


def _kubectl(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", *args], env=project.env, capture_output=True, text=True, timeout=60, check=True)


def test_destroy_leaves_nothing_of_its_own_and_keeps_what_users_made(make_project, kube):
    project = make_project(lambda ns: stack_config(ns, [small_model("gone")]))
    project.up()
    # What the docs tell users to create by hand in the stack's namespace (issue 33).
    _kubectl(project, "-n", project.namespace, "create", "secret", "generic", "hf-token", "--from-literal=token=hf_x")
    project.run("destroy", "--yes", "--skip-preview")
    core, apps, batch = kube.CoreV1Api(), kube.AppsV1Api(), kube.BatchV1Api()
    # The Namespace is retained (forgotten, not deleted): the user's Secret is still there.
    assert core.read_namespace(project.namespace).status.phase == "Active"
    assert core.read_namespaced_secret("hf-token", project.namespace).data["token"]
    exported = json.loads(project.run("stack", "export").stdout)
    assert exported["deployment"].get("resources") in (None, []), "destroy must leave an empty stack"
    # A later `up` adopts the retained Namespace (server-side apply: a create of an existing object
    # updates it) and the next destroy retains it again.
    project.up()
    assert core.read_namespace(project.namespace).metadata.labels["app.kubernetes.io/managed-by"] == "pulumi"
    project.run("destroy", "--yes", "--skip-preview")
    assert core.read_namespaced_secret("hf-token", project.namespace).data["token"]
    selector = "app.kubernetes.io/part-of=llm-serving"
    leftovers = (
        core.list_namespaced_persistent_volume_claim(project.namespace, label_selector=selector).items
        + core.list_namespaced_service(project.namespace, label_selector=selector).items
        + apps.list_namespaced_deployment(project.namespace, label_selector=selector).items
        + batch.list_namespaced_job(project.namespace, label_selector=selector).items
    )
    assert [o.metadata.name for o in leftovers] == []
