"""Playing the k8s-nim-operator on the simulated cluster, where it does not run (its module is not
served): the tests write NIMCache and NIMService status the way the operator does (its state strings
and condition types, ../shared/nim-crd-notes.md) and render what it renders for a NIMService, owned
by it: a Deployment and a Service, or for ``spec.multiNode`` a LeaderWorkerSet and a Service on its
leaders, shaped as k8s-nim-operator v3.1.2 shapes them (``manifests/lws.yaml``,
``api/apps/v1alpha1/nimservice_types.go``), for the real LWS controller to run. Also `pulumi up` in
the background while a test plays the operator, and the readers the operator-path modules share
(tests/integration/test_nim_operator_cluster.py, test_nim_multinode_cluster.py).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Optional

from components.compile import nim as nim_compile
from testkit.harness import REPO
from tests.support.fixture_crds import wait_for

GROUP, VERSION = nim_compile.GROUP, nim_compile.VERSION
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
WAIT = 120  # seconds for any one step the engine or the cluster takes


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, status: str, reason: str, message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": now()}



def operator_pod_security(spec: dict) -> dict:
    """The pod securityContext of k8s-nim-operator v3.1.2's Deployment and LeaderWorkerSet
    templates (outside VMware TKGS): the NIMService's uid/gid and fsGroup, and nothing else — no
    runAsNonRoot, no seccomp, and no container securityContext at all. Pod Security `restricted`
    refuses such pods; the namespace the stack creates for operator-path models enforces `baseline`
    (components/compile/stack.py pod_security_labels), which the cluster tests prove by running
    these pods as rendered."""
    return {"runAsUser": spec.get("userID", 1000), "runAsGroup": spec.get("groupID", 2000),
            "fsGroup": spec.get("groupID", 2000)}

class Operator:
    """What the k8s-nim-operator writes, written by hand."""

    def __init__(self, kube, namespace: str):
        self.kube, self.namespace = kube, namespace
        self.custom = kube.CustomObjectsApi()

    def get(self, plural: str, name: str) -> Optional[dict]:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)
        except self.kube.exceptions.ApiException as error:
            if error.status == 404:
                return None
            raise

    def wait_created(self, plural: str, name: str, up: BackgroundUp) -> dict:
        found: dict = {}

        def created() -> bool:
            found["object"] = self.get(plural, name)
            return found["object"] is not None

        wait_for(created, WAIT, f"{plural}/{name} to be created by `pulumi up`", up.fail_if_ended)
        return found["object"]

    def set_status(self, plural: str, name: str, status: dict) -> None:
        """Replace the status through the status subresource (as a controller does), retrying
        on a conflict with the engine's own writes."""
        for _ in range(20):
            obj = self.get(plural, name)
            obj["status"] = status
            try:
                self.custom.replace_namespaced_custom_object_status(GROUP, VERSION, self.namespace, plural, name, obj)
                return
            except self.kube.exceptions.ApiException as error:
                if error.status != 409:
                    raise
            time.sleep(0.2)
        raise AssertionError(f"could not write the status of {plural}/{name}")

    # NIMCache states and conditions, in the order the operator reaches them.
    def cache_in_progress(self, name: str) -> None:
        self.set_status("nimcaches", name, {
            "state": "InProgress",
            "pvc": f"{name}-pvc",
            "conditions": [
                condition("NIM_CACHE_PVC_CREATED", "True", "PVCCreated", "The PVC has been created for caching NIM model"),
                condition("NIM_CACHE_JOB_CREATED", "True", "JobCreated", "The Job to cache NIM has been created"),
                condition("NIM_CACHE_JOB_PENDING", "False", "JobRunning", "The Job to cache NIM is in progress"),
            ],
        })

    def cache_ready(self, name: str) -> None:
        self.set_status("nimcaches", name, {
            "state": "Ready",
            "pvc": f"{name}-pvc",
            "profiles": [{"name": "tensorrt_llm-a100-bf16-tp1-throughput", "model": "meta/llama-3.1-8b-instruct",
                          "release": "1.8.4", "config": {"tp": "1", "precision": "bf16"}}],
            "conditions": [
                condition("NIM_CACHE_PVC_CREATED", "True", "PVCCreated", "The PVC has been created for caching NIM model"),
                condition("NIM_CACHE_JOB_CREATED", "True", "JobCreated", "The Job to cache NIM has been created"),
                condition("NIM_CACHE_JOB_PENDING", "False", "JobRunning", "The Job to cache NIM is in progress"),
                condition("NIM_CACHE_JOB_COMPLETED", "True", "JobCompleted", "The Job to cache NIM has successfully completed"),
            ],
        })

    def cache_failed(self, name: str, why: str) -> None:
        self.set_status("nimcaches", name, {
            "state": "Failed",
            "pvc": f"{name}-pvc",
            "conditions": [
                condition("NIM_CACHE_PVC_CREATED", "True", "PVCCreated", "The PVC has been created for caching NIM model"),
                condition("NIM_CACHE_JOB_CREATED", "True", "JobCreated", "The Job to cache NIM has been created"),
                condition("NIM_CACHE_JOB_COMPLETED", "False", "JobFailed", why),
            ],
        })

    # NIMService: empty until the first reconcile, then NotReady / Ready / Failed, with the
    # condition types `Ready` and `Failed`.
    def service_state(self, name: str, state: str, reason: str, message: str, **extra) -> None:
        ready = "True" if state == "Ready" else "False"
        failed = "True" if state == "Failed" else "False"
        self.set_status("nimservices", name, {
            "state": state,
            "conditions": [
                condition("Ready", ready, reason if state != "Failed" else "NotReady", message),
                condition("Failed", failed, reason if state == "Failed" else "Ready", message if state == "Failed" else ""),
            ],
            **extra,
        })

    def render(self, service: dict) -> None:
        """The Deployment and Service the operator renders for a NIMService (pods selected by
        `app: <name>`, container port `api`, its uid/gid, owned by the NIMService)."""
        meta, spec = service["metadata"], service["spec"]
        name = meta["name"]
        labels = {**(spec.get("labels") or {}), "app.kubernetes.io/name": name, "app.kubernetes.io/instance": name,
                  "app.kubernetes.io/part-of": "nim-service", "app.kubernetes.io/managed-by": "k8s-nim-operator"}
        owner = self.owner(service)
        port = spec["expose"]["service"]["port"]
        image = spec["image"]
        container = {
            "name": name,
            "image": f"{image['repository']}:{image['tag']}",
            "ports": [{"name": "api", "containerPort": port}],
            "env": [{"name": "NIM_CACHE_PATH", "value": "/model-store"}, *(spec.get("env") or [])],
            "resources": spec.get("resources") or {},
            # As v3.1.2's template: no container securityContext (see operator_pod_security).
        }
        for key in ("livenessProbe", "readinessProbe", "startupProbe"):
            if (spec.get(key) or {}).get("enabled", True) and (spec.get(key) or {}).get("probe"):
                container[key] = spec[key]["probe"]
        pod_spec = {
            "containers": [container],
            "automountServiceAccountToken": False,
            "securityContext": operator_pod_security(spec),
        }
        for key in ("nodeSelector", "tolerations"):
            if spec.get(key):
                pod_spec[key] = spec[key]
        object_meta = {"name": name, "namespace": self.namespace, "labels": labels, "ownerReferences": [owner]}
        self.kube.AppsV1Api().create_namespaced_deployment(self.namespace, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": object_meta,
            "spec": {"replicas": spec.get("replicas", 1), "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {**labels, "app": name}}, "spec": pod_spec}},
        })
        self.kube.CoreV1Api().create_namespaced_service(self.namespace, {
            "apiVersion": "v1", "kind": "Service", "metadata": object_meta,
            "spec": {"type": "ClusterIP", "selector": {"app": name},
                     "ports": [{"name": "api", "port": port, "targetPort": "api"}]},
        })

    def owner(self, service: dict) -> dict:
        meta = service["metadata"]
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NIMService", "name": meta["name"], "uid": meta["uid"],
                "controller": True, "blockOwnerDeletion": True}

    def render_group(self, service: dict) -> str:
        """The LeaderWorkerSet and Service the operator renders for a multi-node NIMService (v3.1.2):
        named ``<name>-lws``, ``replicas`` groups of ``parallelism.pipeline`` pods, every pod with the
        NIMService's resources, leaders labelled ``app: <name>-lws`` and ``nim-llm-role: leader`` plus
        the NIMService's labels (workers get none), ``RecreateGroupOnPodRestart``, ``LeaderCreated``,
        ``maxSurge: 0``; the Service, named after the NIMService, selects the leaders. Minimal: the
        MPI ConfigMaps/Secret, env and probes the operator adds are left out (no container runs here);
        the pods carry the securityContext the operator's template gives them, nothing more.
        Returns the LeaderWorkerSet's name."""
        meta, spec = service["metadata"], service["spec"]
        name, lws = meta["name"], f"{meta['name']}-lws"
        port = spec["expose"]["service"]["port"]
        image = spec["image"]
        standard = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name,
                    "app.kubernetes.io/part-of": "nim-service", "app.kubernetes.io/managed-by": "k8s-nim-operator"}
        labels = {**standard, **(spec.get("labels") or {})}
        selector = {"app": lws, "nim-llm-role": "leader"}

        def pod_spec(container: str) -> dict:
            result = {
                "containers": [{
                    "name": container, "image": f"{image['repository']}:{image['tag']}",
                    "ports": [{"name": "api", "containerPort": port, "protocol": "TCP"}],
                    "resources": spec.get("resources") or {},
                    # As v3.1.2's template: no container securityContext (see operator_pod_security).
                }],
                "securityContext": operator_pod_security(spec),
            }
            for key in ("nodeSelector", "tolerations"):
                if spec.get(key):
                    result[key] = spec[key]
            return result

        object_meta = {"name": lws, "namespace": self.namespace, "labels": labels, "ownerReferences": [self.owner(service)]}
        self.custom.create_namespaced_custom_object(LWS_GROUP, LWS_VERSION, self.namespace, LWS_PLURAL, {
            "apiVersion": f"{LWS_GROUP}/{LWS_VERSION}", "kind": "LeaderWorkerSet", "metadata": object_meta,
            "spec": {
                "replicas": spec.get("replicas", 1),
                "leaderWorkerTemplate": {
                    "size": spec["multiNode"]["parallelism"]["pipeline"],
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": {"metadata": {"labels": {**selector, **(spec.get("labels") or {})}},
                                       "spec": pod_spec("nim-leader")},
                    "workerTemplate": {"spec": pod_spec("nim-worker")},
                },
                "networkConfig": {"subdomainPolicy": "Shared"},
                "rolloutStrategy": {"type": "RollingUpdate",
                                    "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1}},
                "startupPolicy": "LeaderCreated",
            },
        })
        self.kube.CoreV1Api().create_namespaced_service(self.namespace, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels,
                         "ownerReferences": [self.owner(service)]},
            "spec": {"type": "ClusterIP", "selector": selector,
                     "ports": [{"name": "api", "port": port, "targetPort": "api", "protocol": "TCP"}]},
        })
        return lws

    def leader_worker_set(self, name: str) -> Optional[dict]:
        try:
            return self.custom.get_namespaced_custom_object(LWS_GROUP, LWS_VERSION, self.namespace, LWS_PLURAL, name)
        except self.kube.exceptions.ApiException as error:
            if error.status == 404:
                return None
            raise

    def group_available(self, name: str) -> bool:
        """The operator's own readiness test of a multi-node NIMService (isLeaderWorkerSetReady):
        the LeaderWorkerSet's condition Available is True."""
        lws = self.leader_worker_set(name) or {}
        return any(c.get("type") == "Available" and c.get("status") == "True"
                   for c in (lws.get("status") or {}).get("conditions") or [])


# --- `pulumi up` in the background, and what the tests read -------------------------------------

class BackgroundUp(contextlib.AbstractContextManager):
    """`pulumi up` running while the test plays the operator; stopped if the test fails first."""

    def __init__(self, project):
        self.project = project
        command = ["pulumi", "up", "--yes", "--skip-preview", "--non-interactive", "-s", project.stack]
        # Files, not pipes: nobody reads while the test plays the operator, and a full pipe blocks.
        self.out, self.err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(command, cwd=project.root, env=project.env, text=True,
                                        stdout=self.out, stderr=self.err)
        self._result: Optional[subprocess.CompletedProcess] = None

    def done(self) -> bool:
        return self.process.poll() is not None

    def fail_if_ended(self, what: str) -> None:
        """For ``wait_for``: stop waiting on the operator's side once `pulumi up` has ended."""
        if self.done():
            result = self.result()
            raise AssertionError(f"`pulumi up` ended (exit {result.returncode}) while waiting for {what}:\n"
                                 f"{result.stdout[-4000:]}\n{result.stderr[-3000:]}")

    def result(self, timeout: Optional[float] = None) -> subprocess.CompletedProcess:
        if self._result is None:
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.out.seek(0)
                raise AssertionError(f"`pulumi up` still running after {timeout}s; its output so far:\n"
                                     f"{self.out.read()[-4000:]}") from None
            self.out.seek(0)
            self.err.seek(0)
            self._result = subprocess.CompletedProcess(self.process.args, self.process.returncode,
                                                       self.out.read(), self.err.read())
        return self._result

    def __exit__(self, *exc_info) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # pulumi cancels the update and unlocks the stack
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            # A stopped update leaves the stack locked: unlock it, or the module's destroy fails
            # and leaves the namespace behind.
            self.project.run("cancel", "--yes", check=False)
        self.out.close()
        self.err.close()


def cli_status(project) -> tuple[int, dict]:
    """`python -m components status --json` on the stack's config, as on-call would run it."""
    result = subprocess.run([sys.executable, "-m", "components", "status", "--config", str(project.config_file), "--json"],
                            cwd=REPO, env=project.env, capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 3), f"status failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.returncode, json.loads(result.stdout)


def output_text(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr


def assert_kept(sent, stored, path: str = "spec") -> None:
    """Everything we sent is in the stored object: the API server pruned no field."""
    if isinstance(sent, dict):
        assert isinstance(stored, dict), f"{path}: stored as {stored!r}"
        for key, value in sent.items():
            assert key in stored, f"{path}.{key} was pruned: the operator's CRD has no such field"
            assert_kept(value, stored[key], f"{path}.{key}")
    elif isinstance(sent, list):
        assert isinstance(stored, list) and len(stored) == len(sent), f"{path}: {stored!r} != {sent!r}"
        for index, (a, b) in enumerate(zip(sent, stored, strict=True)):
            assert_kept(a, b, f"{path}[{index}]")
    else:
        assert stored == sent, f"{path}: stored {stored!r}, sent {sent!r}"


def state_resources(project) -> list[dict]:
    """Every resource of the stack's state (`pulumi stack export`)."""
    exported = json.loads(project.run("stack", "export").stdout)
    return (exported.get("deployment") or {}).get("resources") or []


def status_record(project, model: str) -> dict:
    """The model's ModelStatus resource as the state records it."""
    found = [r for r in state_resources(project)
             if r["type"].endswith(":ModelStatus") and r["urn"].rsplit("::", 1)[-1] == f"{model}-status"]
    assert len(found) == 1, [r["urn"] for r in state_resources(project)]
    return found[0]


