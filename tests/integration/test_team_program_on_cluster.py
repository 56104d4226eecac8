"""A team's own program (examples/team-program) on the simulated cluster, with the llm-serving
package installed from its wheel: it deploys three models (one an S3 `load: stream` model reading
the program's own Secret, issue 40) and a router on its own provider and Namespace, passed as
their Outputs, reports their status in its outputs, and destroys all of it (issue 33).

The program runs in a virtualenv of its own with the wheel installed (tests/support/wheel.py),
from a copy of the example outside the checkout: the package it imports, and the providers the
engine unpickles for `refresh` and `destroy`, are the wheel's. The cluster is the program's secret
config (the kubeconfig's content), with KUBECONFIG pointing at no file: the program's provider
and llm-serving's status and gate reach the cluster through that content alone (issue 33 item 2).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest

from testkit.harness import REPO, delete_namespaces, require_engine
from tests.support.wheel import build_wheel, venv_with

pytestmark = pytest.mark.integration


class TeamProject:
    def __init__(self, root, stack: str):
        self.root, self.stack = root, stack
        (root / ".state").mkdir()
        self.env = {**os.environ, "PULUMI_BACKEND_URL": f"file://{root / '.state'}",
                    "PULUMI_CONFIG_PASSPHRASE": "integration-tests", "PULUMI_SKIP_UPDATE_CHECK": "true",
                    "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true"}

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = ["pulumi", *args, "--non-interactive", "-s", self.stack]
        result = subprocess.run(command, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=900)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}")
        return result


@pytest.fixture(scope="module")
def team(tmp_path_factory, kube):
    require_engine()
    base = tmp_path_factory.mktemp("team")
    root = base / "team-program"
    shutil.copytree(REPO / "examples" / "team-program", root)
    venv_with(build_wheel(base / "wheel"), root / "venv")
    suffix = uuid.uuid4().hex[:6]
    project = TeamProject(root, f"team{suffix}")
    project.namespace = f"it-team-{suffix}"
    subprocess.run(["pulumi", "stack", "init", project.stack, "--non-interactive"], cwd=root, env=project.env,
                   check=True, capture_output=True)
    for key, value in (("namespace", project.namespace), ("storageClassName", "local-weights")):
        project.run("config", "set", key, value)
    # The store's keys, as the program's secret config (KWOK runs no container: nothing reads the
    # store here; tests/streamer runs the streamer against a real S3 server).
    for key, value in (("s3AccessKeyId", "team-id"), ("s3SecretAccessKey", "team-secret-key")):
        project.run("config", "set", "--secret", key, value)
    # The cluster as the program's own secret config, the kubeconfig's content; from here on no
    # kubeconfig file is in reach of the engine, the provider or the status and gate providers.
    with open(os.environ["KUBECONFIG"]) as content:
        subprocess.run(["pulumi", "config", "set", "--secret", "kubeconfig", "-s", project.stack, "--non-interactive"],
                       cwd=root, env=project.env, stdin=content, check=True, capture_output=True)
    project.env["KUBECONFIG"] = str(base / "no-such-kubeconfig")
    yield project
    delete_namespaces(kube.CoreV1Api(), [project.namespace])  # after a failure only: destroy removes it


def test_the_team_program_deploys_reports_and_destroys_from_the_package(team, kube):
    team.run("up", "--yes", "--skip-preview")
    outputs = json.loads(team.run("stack", "output", "--json").stdout)
    assert outputs["states"] == {"chat": "READY", "summarize": "READY", "stream": "READY"}, outputs
    assert outputs["endpoints"]["chat"] == f"http://chat.{team.namespace}.svc.cluster.local:8000"
    assert outputs["router"] and "llm-router" in json.dumps(outputs["router"])
    apps = kube.AppsV1Api()
    served = {d.metadata.name for d in apps.list_namespaced_deployment(team.namespace).items}
    assert {"chat", "summarize", "llm-router", "llm-router-gateway"} <= served, served
    # The Namespace is the program's own (its label), not one llm-serving made.
    assert kube.CoreV1Api().read_namespace(team.namespace).metadata.labels.get("team") == "a"
    # The streamed model: no weights volume, no puller; its server streams from the store with the
    # keys of the program's Secret.
    selector = "llm-serving.dev/model=stream"
    assert kube.BatchV1Api().list_namespaced_job(team.namespace, label_selector=selector).items == []
    assert kube.CoreV1Api().list_namespaced_persistent_volume_claim(team.namespace, label_selector=selector).items == []
    server = apps.read_namespaced_deployment("stream", team.namespace).spec.template.spec.containers[0]
    assert server.args[:3] == ["s3://models/tiny-llm/", "--load-format", "runai_streamer"]
    keys = {e.name: e for e in server.env}["AWS_SECRET_ACCESS_KEY"].value_from.secret_key_ref
    assert keys.name == "team-s3-keys" and kube.CoreV1Api().read_namespaced_secret("team-s3-keys", team.namespace)
    state = json.loads(team.run("stack", "export").stdout)["deployment"]["resources"]
    # Every Kubernetes object is on the program's provider; no default provider was used.
    providers = {r["urn"] for r in state if r["type"] == "pulumi:providers:kubernetes"}
    assert [p.rsplit("::", 1)[1] for p in providers] == ["team-cluster"], providers
    kinds = [r for r in state if r["type"].startswith("kubernetes:")]
    assert kinds and all(r["provider"].split("::")[-2] == "team-cluster" for r in kinds)
    # Refresh re-reads each status record with the status provider unpickled from the state (the
    # wheel's modules): still serving.
    team.run("refresh", "--yes")
    state = json.loads(team.run("stack", "export").stdout)["deployment"]["resources"]
    statuses = {r["urn"].rsplit("::", 1)[1]: r["outputs"].get("state") for r in state
                if r["type"].endswith("ModelStatus")}
    assert statuses == {"chat-status": "READY", "summarize-status": "READY", "stream-status": "READY"}, statuses
    # The content is in the state only encrypted.
    plain = open(os.environ["KUBECONFIG"]).read()
    marker = next(line.split(":", 1)[1].strip() for line in plain.splitlines() if "server:" in line)
    assert marker not in json.dumps(json.loads(team.run("stack", "export").stdout)), "the kubeconfig in plain text"
    team.run("destroy", "--yes", "--skip-preview")
    assert json.loads(team.run("stack", "export").stdout)["deployment"].get("resources") in (None, [])
