"""Operator-path NIM models on the simulated cluster, under the real engine (issue 5).

There is no NIM operator here: the module installs its CRDs (tests/fixtures/crds, a faithful
minimal stand-in, see the README there) and plays the operator itself. It writes NIMCache and
NIMService status through the status subresource the way the operator does (its state strings
and condition types, from ../shared/nim-crd-notes.md) and renders the NIMService's Deployment and
Service, owned by the NIMService, as the operator would.

Order matters and is the file's order: first the cluster without the CRDs (an operator-path
model stops at preview, a vLLM stack does not care), then with them. The CRDs are deleted when
the module ends, after its stacks are destroyed, so every other test sees a cluster without them.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Callable, Optional

import pytest
import yaml

from components.compile import nim as nim_compile
from components.config import load_stack_config
from harness import REPO, small_model, stack_config

pytestmark = pytest.mark.integration

CRD_DIR = REPO / "tests" / "fixtures" / "crds"
FIXTURE_LABEL, FIXTURE_VALUE = "llm-serving.dev/test-fixture", "nim-operator-crds"
GROUP, VERSION = nim_compile.GROUP, nim_compile.VERSION
NIM_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"
WAIT = 120  # seconds for any one step the engine or the cluster takes


def operator_model(name: str) -> dict:
    return {
        "name": name,
        "engine": "nim",
        "path": "operator",
        "image": NIM_IMAGE,
        "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct", "revision": "main"},
        "gpus": 1,
        "resources": {"cpu": "1", "memory": "4Gi"},
        "weights": {"size": "1Gi"},
        "nim": {"authSecret": "ngc-api"},
    }


def operator_config(namespace: str, *names: str) -> dict:
    return stack_config(namespace, [operator_model(n) for n in names])


def compiled(config: dict, name: str) -> nim_compile.NimManifests:
    stack = load_stack_config(config)
    return nim_compile.compile_nim_operator(next(m for m in stack.models if m.name == name), stack)


# --- the CRDs ---------------------------------------------------------------------------------

def crd_documents() -> list[dict]:
    return [yaml.safe_load(path.read_text()) for path in sorted(CRD_DIR.glob("*.yaml"))]


def installed_crds(kube) -> dict[str, dict]:
    api = kube.ApiextensionsV1Api()
    found = {}
    for name in nim_compile.CRD_NAMES:
        try:
            found[name] = api.read_custom_resource_definition(name).to_dict()
        except kube.exceptions.ApiException as error:
            if error.status != 404:
                raise
    return found


def ours(crd: dict) -> bool:
    return ((crd.get("metadata") or {}).get("labels") or {}).get(FIXTURE_LABEL) == FIXTURE_VALUE


def delete_fixture_crds(kube) -> None:
    api = kube.ApiextensionsV1Api()
    for name, crd in installed_crds(kube).items():
        if ours(crd):
            try:
                api.delete_custom_resource_definition(name)
            except kube.exceptions.ApiException as error:
                if error.status != 404:
                    raise
    wait_for(lambda: not installed_crds(kube), WAIT, "the NIM CRDs to be deleted")


@pytest.fixture(scope="module", autouse=True)
def cluster_without_crds_at_the_end(kube):
    """Autouse, so set up before ``make_project`` and torn down after it has destroyed the stacks:
    the CRDs go last, and only ours (a real operator's are never touched)."""
    present = installed_crds(kube)
    foreign = [name for name, crd in present.items() if not ours(crd)]
    if foreign:
        pytest.fail(f"the cluster has NIM operator CRDs this module did not install ({', '.join(foreign)}); "
                    "it needs a cluster without them")
    delete_fixture_crds(kube)  # left by an interrupted run
    yield
    delete_fixture_crds(kube)


@pytest.fixture(scope="module")
def crds_installed(kube):
    api = kube.ApiextensionsV1Api()
    for document in crd_documents():
        api.create_custom_resource_definition(document)

    def established() -> bool:
        crds = installed_crds(kube)
        return len(crds) == len(nim_compile.CRD_NAMES) and all(
            any(c["type"] == "Established" and c["status"] == "True" for c in (crd["status"]["conditions"] or []))
            for crd in crds.values())

    wait_for(established, WAIT, "the NIM CRDs to be Established")
    # Established is not yet discoverable everywhere: wait until the kinds can be listed.
    custom = kube.CustomObjectsApi()

    def listable() -> bool:
        for plural in ("nimcaches", "nimservices"):
            custom.list_namespaced_custom_object(GROUP, VERSION, "default", plural)
        return True

    wait_for(listable, WAIT, "the NIM kinds to be served")


# --- playing the operator -----------------------------------------------------------------------

def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, status: str, reason: str, message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": now()}


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

    def wait_created(self, plural: str, name: str, up: "BackgroundUp") -> dict:
        found: dict = {}

        def created() -> bool:
            found["object"] = self.get(plural, name)
            return found["object"] is not None

        wait_for(created, WAIT, f"{plural}/{name} to be created by `pulumi up`", up)
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
        owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NIMService", "name": name, "uid": meta["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        port = spec["expose"]["service"]["port"]
        image = spec["image"]
        container = {
            "name": name,
            "image": f"{image['repository']}:{image['tag']}",
            "ports": [{"name": "api", "containerPort": port}],
            "env": [{"name": "NIM_CACHE_PATH", "value": "/model-store"}, *(spec.get("env") or [])],
            "resources": spec.get("resources") or {},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
        for key in ("livenessProbe", "readinessProbe", "startupProbe"):
            if (spec.get(key) or {}).get("enabled", True) and (spec.get(key) or {}).get("probe"):
                container[key] = spec[key]["probe"]
        pod_spec = {
            "containers": [container],
            "automountServiceAccountToken": False,
            "securityContext": {"runAsUser": spec.get("userID", 1000), "runAsGroup": spec.get("groupID", 2000),
                                "fsGroup": spec.get("groupID", 2000), "runAsNonRoot": True,
                                "seccompProfile": {"type": "RuntimeDefault"}},
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


# --- helpers -----------------------------------------------------------------------------------

def wait_for(predicate: Callable[[], bool], timeout: float, what: str, up: Optional["BackgroundUp"] = None) -> None:
    deadline = time.monotonic() + timeout
    last_error: Optional[Exception] = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as error:  # noqa: BLE001 - retried until the deadline
            last_error = error
        if up is not None and up.done():
            result = up.result()
            raise AssertionError(f"`pulumi up` ended (exit {result.returncode}) while waiting for {what}:\n"
                                 f"{result.stdout[-4000:]}\n{result.stderr[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


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
        for index, (a, b) in enumerate(zip(sent, stored)):
            assert_kept(a, b, f"{path}[{index}]")
    else:
        assert stored == sent, f"{path}: stored {stored!r}, sent {sent!r}"


def model_resources_in_state(project, model: str) -> list[str]:
    """The model's custom resources (NIMCache, NIMService, the check, the status record) in the
    stack's state; its component alone does not count."""
    exported = json.loads(project.run("stack", "export").stdout)
    resources = (exported.get("deployment") or {}).get("resources") or []
    return [r["urn"] for r in resources
            if r.get("custom") and r["urn"].rsplit("::", 1)[-1].startswith(f"{model}-")]


# --- 1. without the CRDs ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nim_project(make_project):
    """One stack with one operator-path model: first on the bare cluster, then with the CRDs."""
    return make_project(lambda ns: operator_config(ns, "nimop"))


def assert_says_how_to_fix(text: str) -> None:
    for needed in ("model nimop uses path: operator", "nimcaches.apps.nvidia.com", "nimservices.apps.nvidia.com",
                   "helm install nim-operator nvidia/k8s-nim-operator", "path: raw"):
        assert needed in text, f"{needed!r} missing from:\n{text[-4000:]}"


def test_without_crds_an_operator_model_stops_at_preview(nim_project, kube):
    assert installed_crds(kube) == {}, "this test needs a cluster without the NIM CRDs"
    preview = nim_project.run("preview", check=False)
    assert preview.returncode != 0, output_text(preview)
    assert_says_how_to_fix(output_text(preview))

    up = nim_project.up(check=False)
    assert up.returncode != 0, output_text(up)
    assert_says_how_to_fix(output_text(up))
    # Stopped before anything NIM-specific: no custom resource in the state, none on the cluster
    # (the kinds do not even exist), and no pod or volume in the namespace.
    assert model_resources_in_state(nim_project, "nimop") == []
    assert installed_crds(kube) == {}
    core = kube.CoreV1Api()
    for lister in (core.list_namespaced_pod, core.list_namespaced_persistent_volume_claim):
        try:
            assert lister(nim_project.namespace).items == []
        except kube.exceptions.ApiException as error:
            assert error.status == 404  # the namespace itself was not created


def test_without_crds_a_vllm_stack_previews_as_usual(nim_project, kube):
    """Same stack, cluster and missing CRDs; its one model on vLLM instead: nothing asks for them."""
    operator = operator_config(nim_project.namespace, "nimop")
    nim_project.write_config(stack_config(nim_project.namespace, [small_model("nimop")]))
    try:
        preview = nim_project.run("preview", "--diff")
    finally:
        nim_project.write_config(operator)
    assert installed_crds(kube) == {}
    text = output_text(preview)
    assert "nimcaches" not in text and "NimOperatorCheck" not in text and "k8s-nim-operator" not in text, text[-3000:]
    assert "kubernetes:apps/v1:Deployment" in text  # the vLLM model's objects are planned


# --- 2. with the CRDs, the test playing the operator --------------------------------------------

def test_operator_model_reports_what_the_operator_says_and_up_ends_ready(nim_project, crds_installed, kube):
    project = nim_project  # the stack that stopped above; the CRDs are installed now
    config = operator_config(project.namespace, "nimop")
    manifests = compiled(config, "nimop")
    names = manifests.names
    operator = Operator(kube, project.namespace)

    with BackgroundUp(project) as up:
        cache = operator.wait_created("nimcaches", names.cache, up)
        service = operator.wait_created("nimservices", names.service, up)
        # What the engine sent reached the cluster whole: no field outside the operator's API.
        assert_kept(manifests.cache["spec"], cache["spec"])
        assert_kept(manifests.service["spec"], service["spec"])
        assert "state" not in (service.get("status") or {})

        # Not reconciled yet: NIMService.status.state is null. PENDING, never a crash.
        code, status = cli_status(project)
        assert (code, status["nimop"]["state"]) == (3, "PENDING"), status
        assert status["nimop"]["reason"] in ("caching", "not-reconciled"), status

        # The operator starts caching; the service waits for the cache.
        operator.cache_in_progress(names.cache)
        operator.service_state(names.service, "NotReady", "NIMCacheNotReady", f"NIMCache {names.cache} not ready")
        code, status = cli_status(project)
        assert (code, status["nimop"]["state"], status["nimop"]["reason"]) == (3, "PENDING", "caching"), status
        assert f"NIMCache {names.cache} is InProgress" in status["nimop"]["message"], status

        # Cached: the operator renders the server and reports NotReady until it is up.
        operator.cache_ready(names.cache)
        operator.render(operator.get("nimservices", names.service))
        operator.service_state(names.service, "NotReady", "NotReady", f"Deployment {names.service} is not ready")
        code, status = cli_status(project)
        assert (code, status["nimop"]["state"]) == (3, "PENDING"), status
        assert not up.done(), "`pulumi up` must wait while the operator says NotReady"

        # Ready, as the operator reports it once the Deployment is available.
        operator.service_state(names.service, "Ready", "Ready", f"Deployment {names.service} is ready",
                               availableReplicas=1,
                               model={"name": "nimop",
                                      "clusterEndpoint": f"{names.service}.{project.namespace}.svc.cluster.local:8000",
                                      "externalEndpoint": ""})

        def ready() -> bool:
            code, status = cli_status(project)
            assert status["nimop"]["state"] in ("PENDING", "READY"), status
            return (code, status["nimop"]["state"]) == (0, "READY")

        wait_for(ready, 60, "the status command to report nimop READY once the operator says Ready")
        result = up.result(WAIT)
    assert result.returncode == 0, output_text(result)[-6000:]

    model = project.outputs()["models"]["nimop"]
    assert model["path"] == "operator"
    assert model["objects"] == {"nim_cache": names.cache, "nim_service": names.service}
    assert model["status"]["state"] == "READY", model
    assert model["status"]["targets"], "READY must mean at least one routable target"
    assert model["endpoint_url"] == f"http://nimop.{project.namespace}.svc.cluster.local:8000"
    in_state = model_resources_in_state(project, "nimop")  # what the CRD-less run must not have
    for kind in ("NimOperatorCheck", "NIMCache", "NIMService", "ModelStatus"):
        assert any(f"{kind}::" in urn for urn in in_state), (kind, in_state)
    # The stored custom resources (server defaults, the operator's status) cause no drift.
    project.run("preview", "--expect-no-changes")


def test_operator_failure_fails_up_with_its_reason(nim_project, crds_installed, kube):
    """A second model whose NIMService the operator marks Failed: `up` stops with the operator's
    reason; then its cache fails, which the status command reports as the cause."""
    project = nim_project
    config = operator_config(project.namespace, "nimop", "nimbad")
    names = compiled(config, "nimbad").names
    operator = Operator(kube, project.namespace)
    project.write_config(config)
    why = "Deployment nimbad exceeded its progress deadline"

    with BackgroundUp(project) as up:
        operator.wait_created("nimcaches", names.cache, up)
        operator.cache_ready(names.cache)
        operator.wait_created("nimservices", names.service, up)
        operator.service_state(names.service, "Failed", "DeploymentFailed", why)

        def error() -> bool:
            return cli_status(project)[1]["nimbad"]["state"] == "ERROR"

        wait_for(error, 60, "the status command to report nimbad ERROR once the operator says Failed")
        result = up.result(WAIT)
    text = output_text(result)
    assert result.returncode != 0, text[-6000:]
    assert f"NIMService {names.service} failed: DeploymentFailed: {why}" in text, text[-6000:]
    assert "reason: deployment-failed" in text, text[-6000:]

    code, status = cli_status(project)
    assert code == 3
    assert status["nimop"]["state"] == "READY", status  # the other model is untouched
    assert (status["nimbad"]["state"], status["nimbad"]["reason"]) == ("ERROR", "deployment-failed"), status

    # The cache failing is the cause the status names first.
    job_failure = f"Job {names.cache}-job failed: BackoffLimitExceeded"
    operator.cache_failed(names.cache, job_failure)
    code, status = cli_status(project)
    assert (code, status["nimbad"]["state"], status["nimbad"]["reason"]) == (3, "ERROR", "cache-failed"), status
    assert job_failure in status["nimbad"]["message"], status
