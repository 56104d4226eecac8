"""Operator-path NIM models on the simulated cluster, under the real engine (issue 5).

There is no NIM operator here: the module installs its real CRDs (vendored in
../shared/vendor/nim-operator-crds, see tests/real_crds.py) and plays the operator itself. It writes NIMCache and
NIMService status through the status subresource the way the operator does (its state strings
and condition types, from ../shared/nim-crd-notes.md) and renders the NIMService's Deployment and
Service, owned by the NIMService, as the operator would.

Order matters and is the file's order: first the cluster without the CRDs (an operator-path
model stops at preview, a vLLM stack does not care), then with them. The CRDs are deleted when
the module ends, after its stacks are destroyed, so every other test sees a cluster without them.

With the CRDs: the operator reports, `up` ends READY or stops with the operator's reason, and
`pulumi refresh` records what the operator says now. Last, a second stack (an `ngc` and an `hf`
cache, the teardown identity on) is deployed and its models are torn down as that identity, the
way tests/faults/test_fault_teardown_identity.py does it for vLLM models.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from components.compile import nim as nim_compile
from components.compile.rbac import compile_teardown_identity
from components.config import load_stack_config
from testkit.harness import small_model, stack_config
from tests.support.fixture_crds import FixtureCrds, wait_for
from tests.support.nim_operator import (
    WAIT,
    BackgroundUp,
    Operator,
    assert_kept,
    cli_status,
    output_text,
    state_resources,
    status_record,
)
from tests.support.real_crds import NIM_CRDS_ABSENT, nim_operator_crds

GROUP, VERSION = nim_compile.GROUP, nim_compile.VERSION
# The operator's own CRDs (main at f63f74d7ad22, the API the compiler follows), vendored in
# ../shared; without them the module skips, saying why.
NIM_FILES = nim_operator_crds()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(NIM_FILES is None, reason=NIM_CRDS_ABSENT)]
NIM_CRDS = FixtureCrds(NIM_FILES or [], "nim-operator-crds")
NIM_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"


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

@pytest.fixture(scope="module", autouse=True)
def cluster_without_crds_at_the_end(kube):
    """Autouse, so set up before ``make_project`` and torn down after it has destroyed the stacks:
    the CRDs go last, and only ours (a real operator's are never touched)."""
    yield from NIM_CRDS.absent_until_installed(kube, "a real NIM operator")


@pytest.fixture(scope="module")
def crds_installed(kube):
    NIM_CRDS.install(kube)


# --- helpers (playing the operator, `pulumi up` in the background: tests/support/nim_operator.py) --

def model_resources_in_state(project, model: str) -> list[str]:
    """The model's custom resources (NIMCache, NIMService, the check, the status record) in the
    stack's state; its component alone does not count."""
    return [r["urn"] for r in state_resources(project)
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
    assert NIM_CRDS.installed(kube) == {}, "this test needs a cluster without the NIM CRDs"
    preview = nim_project.run("preview", check=False)
    assert preview.returncode != 0, output_text(preview)
    assert_says_how_to_fix(output_text(preview))

    up = nim_project.up(check=False)
    assert up.returncode != 0, output_text(up)
    assert_says_how_to_fix(output_text(up))
    # Stopped before anything NIM-specific: no custom resource in the state, none on the cluster
    # (the kinds do not even exist), and no pod or volume in the namespace.
    assert model_resources_in_state(nim_project, "nimop") == []
    assert NIM_CRDS.installed(kube) == {}
    core = kube.CoreV1Api()
    for lister in (core.list_namespaced_pod, core.list_namespaced_persistent_volume_claim):
        try:
            assert lister(nim_project.namespace).items == []
        except kube.exceptions.ApiException as error:
            assert error.status == 404  # the namespace itself was not created


def test_without_crds_a_vllm_stack_previews_as_usual(nim_project, kube):
    """Same stack, cluster and missing CRDs; its one model on vLLM instead: nothing asks for them."""
    with nim_project.config_for_now(stack_config(nim_project.namespace, [small_model("nimop")])):
        preview = nim_project.run("preview", "--diff")
    assert NIM_CRDS.installed(kube) == {}
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


def test_refresh_records_the_operators_failure(nim_project, crds_installed, kube):
    """READY nimop, then the operator marks its NIMService Failed: `pulumi refresh` records ERROR
    with the operator's reason in the model's status record (NimStatusProvider.read)."""
    project = nim_project
    names = compiled(operator_config(project.namespace, "nimop"), "nimop").names
    assert status_record(project, "nimop")["outputs"]["state"] == "READY"  # where the tests above left it
    why = "Deployment nimop has 0 of 1 replicas available after an image update"
    Operator(kube, project.namespace).service_state(names.service, "Failed", "DeploymentFailed", why)

    project.run("refresh", "--yes", "--skip-preview")
    outputs = status_record(project, "nimop")["outputs"]
    assert (outputs["state"], outputs["reason"]) == ("ERROR", "deployment-failed"), outputs
    assert f"NIMService {names.service} failed: DeploymentFailed: {why}" in outputs["message"], outputs
    assert outputs["details"]["state"] == "Failed", outputs


def test_after_refresh_an_error_record_is_waited_on_again(nim_project, crds_installed):
    """The record refresh left says ERROR: the next `up` must wait for the model again (and fail
    with the reason, or record READY), so `pulumi preview` plans an update of the status record,
    as the raw path's ModelStatusProvider.diff does."""
    project = nim_project
    assert status_record(project, "nimop")["outputs"]["state"] == "ERROR"
    planned = {step["urn"].rsplit("::", 1)[-1]: step["op"] for step in project.preview_steps()}
    # "same" steps are not listed. (This once failed: the NIM status diff compared inputs only.)
    assert planned.get("nimop-status", "same") == "update", f"nimop-status is not waited on again; planned: {planned}"


# --- 3. the teardown identity on operator-path models --------------------------------------------
# As tests/faults/test_fault_teardown_identity.py does for vLLM models: the stack's provider reads
# a kubeconfig file of its own (the path is what `up` records), which is then switched to a token
# of the stack's ServiceAccount, bound to the Role the stack compiled and applied; the models go
# with `pulumi destroy --target <model components> --target <stack Secret> --target-dependents`.

TEARDOWN_IDENTITY = "llm-serving-teardown"
NGC_STACK_SECRET = "llm-serving-ngc-api-key"  # made from llm-serving:ngcApiKey
NGC_KEY = "nvapi-TeardownIdentityProbe"
TEARDOWN_MODELS = ("tdngc", "tdhf")
DESTROY_TIMEOUT = 60  # the destroy takes seconds; a hang (an informer that cannot list) is killed


def teardown_config(namespace: str) -> dict:
    """An `ngc` cache reading the stack's Secret (no nim.authSecret: it defaults to the Secret made
    from ngcApiKey) and an `hf` cache with Secrets of its own; NetworkPolicies on."""
    ngc = {key: value for key, value in operator_model("tdngc").items() if key != "nim"}
    hf = {**operator_model("tdhf"), "nim": {"cacheSource": "hf", "authSecret": "hf-auth", "pullSecret": "ngc-pull"}}
    return stack_config(namespace, [ngc, hf], teardownIdentity={"enabled": True},
                        networkPolicy={"enabled": True, "allowFrom": []})


def teardown_stack(namespace: str):
    """The typed config the program loads (ngcApiKey set: its value is never needed here)."""
    return load_stack_config({**teardown_config(namespace), "ngcApiKey": {"secure": "v1:x"}})


def compiled_teardown(namespace: str, name: str) -> nim_compile.NimManifests:
    stack = teardown_stack(namespace)
    return nim_compile.compile_nim_operator(next(m for m in stack.models if m.name == name), stack)


def normalized(rules) -> Counter:
    return Counter((frozenset(r.get("apiGroups") or []), frozenset(r.get("resources") or []),
                    frozenset(r.get("verbs") or []), frozenset(r.get("resourceNames") or [])) for r in rules)


def token_kubeconfig(kube, path: Path, admin: str, namespace: str, service_account: str) -> None:
    """Rewrite ``path`` (the file the stack's provider reads) to a token of ``service_account``,
    on the admin kubeconfig's cluster."""
    document = yaml.safe_load(admin)
    context = next(c for c in document["contexts"] if c["name"] == document["current-context"])["context"]
    cluster = next(c for c in document["clusters"] if c["name"] == context["cluster"])["cluster"]
    token = kube.CoreV1Api().create_namespaced_service_account_token(
        service_account, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": service_account, "namespace": namespace}}],
        "current-context": "c",
    }))


def run_killable(project, *args: str, timeout: float) -> tuple[int, str, float]:
    """A pulumi command, killed with its plugins if it hangs (each plugin runs in a process group
    of its own, with the project copy as its working directory)."""
    started = time.monotonic()
    process = subprocess.Popen(["pulumi", *args, "--non-interactive", "-s", project.stack], cwd=project.root,
                               env=project.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        root = Path(project.root).resolve()
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == root:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                continue
        output, _ = process.communicate()
        output += f"\n[killed after {timeout:.0f} s: the destroy hung]"
    return process.returncode, output, time.monotonic() - started


@pytest.fixture(scope="module")
def teardown_project(make_project, crds_installed):
    """(project, its kubeconfig file). Set up after ``make_project``, so torn down before it: the
    module's destroy runs with the admin kubeconfig again."""
    project = make_project(teardown_config)
    admin = Path(os.environ["KUBECONFIG"]).read_text()
    kubeconfig = project.root / "teardown.kubeconfig"
    kubeconfig.write_text(admin)
    project.env["KUBECONFIG"] = str(kubeconfig)
    project.run("config", "set", "--secret", "ngcApiKey", NGC_KEY)
    project.admin_kubeconfig = admin
    yield project, kubeconfig
    kubeconfig.write_text(admin)


def test_teardown_stack_with_ngc_and_hf_caches_ends_ready(teardown_project, kube):
    """Both operator-path models to READY; the hf NIMCache is stored as compiled."""
    project, _ = teardown_project
    ns = project.namespace
    manifests = {name: compiled_teardown(ns, name) for name in TEARDOWN_MODELS}
    operator = Operator(kube, ns)

    with BackgroundUp(project) as up:
        for _name, compiled_model in manifests.items():
            names = compiled_model.names
            cache = operator.wait_created("nimcaches", names.cache, up)
            assert_kept(compiled_model.cache["spec"], cache["spec"])
            operator.cache_ready(names.cache)
        hf_source = manifests["tdhf"].cache["spec"]["source"]["hf"]
        stored = operator.get("nimcaches", manifests["tdhf"].names.cache)["spec"]["source"]
        assert stored == {"hf": hf_source}, stored
        assert hf_source["authSecret"] == "hf-auth" and hf_source["pullSecret"] == "ngc-pull", hf_source
        assert (hf_source["namespace"], hf_source["modelName"], hf_source["revision"]) == (
            "meta-llama", "Llama-3.1-8B-Instruct", "main"), hf_source
        ngc_source = operator.get("nimcaches", manifests["tdngc"].names.cache)["spec"]["source"]
        assert ngc_source["ngc"]["authSecret"] == NGC_STACK_SECRET, ngc_source
        for name, compiled_model in manifests.items():
            names = compiled_model.names
            service = operator.wait_created("nimservices", names.service, up)
            assert_kept(compiled_model.service["spec"], service["spec"])
            operator.render(service)
            operator.service_state(names.service, "Ready", "Ready", f"Deployment {names.service} is ready",
                                   availableReplicas=1,
                                   model={"name": name, "clusterEndpoint": f"{names.service}.{ns}.svc.cluster.local:8000",
                                          "externalEndpoint": ""})
        result = up.result(WAIT)
    assert result.returncode == 0, output_text(result)[-6000:]
    models = project.outputs()["models"]
    assert {name: models[name]["status"]["state"] for name in TEARDOWN_MODELS} == dict.fromkeys(TEARDOWN_MODELS, "READY")

    # The cluster holds the Role the stack compiled, with the NIM kinds in it.
    role = kube.RbacAuthorizationV1Api().read_namespaced_role(TEARDOWN_IDENTITY, ns)
    live = [{"apiGroups": r.api_groups, "resources": r.resources, "verbs": r.verbs, "resourceNames": r.resource_names}
            for r in role.rules]
    rules = next(m for m in compile_teardown_identity(teardown_stack(ns)) if m["kind"] == "Role")["rules"]
    assert normalized(live) == normalized(rules)
    assert any("apps.nvidia.com" in r["apiGroups"] and {"nimcaches", "nimservices"} <= set(r["resources"])
               and "delete" in r["verbs"] for r in live), live


def test_the_shipped_identity_tears_the_operator_models_down(teardown_project, kube):
    project, kubeconfig = teardown_project
    ns = project.namespace
    custom, apps, core = kube.CustomObjectsApi(), kube.AppsV1Api(), kube.CoreV1Api()
    resources = state_resources(project)
    models = [r["urn"] for r in resources if r["type"] == "llm-serving:index:NimModel"]
    secret = [r["urn"] for r in resources if r["type"] == "kubernetes:core/v1:Secret"]
    assert len(models) == len(TEARDOWN_MODELS) and len(secret) == 1, [r["urn"] for r in resources]

    def names(plural: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural)["items"])

    # Control: there is something to delete.
    assert len(names("nimcaches")) == len(names("nimservices")) == len(TEARDOWN_MODELS)
    assert core.read_namespaced_secret(NGC_STACK_SECRET, ns)

    token_kubeconfig(kube, kubeconfig, project.admin_kubeconfig, ns, TEARDOWN_IDENTITY)
    try:
        targets = [arg for urn in (*models, *secret) for arg in ("--target", urn)]
        code, output, seconds = run_killable(project, "destroy", "--yes", "--skip-preview", "--target-dependents",
                                             *targets, timeout=DESTROY_TIMEOUT)
    finally:
        kubeconfig.write_text(project.admin_kubeconfig)
    print(f"\nteardown identity (operator path): targeted destroy {seconds:.1f} s")
    assert code == 0, output[-5000:]
    # A refused call the provider shrugs off (a GET while awaiting a delete) is still a missing verb.
    assert "forbidden" not in output, output[-5000:]

    left = {r["urn"].split("::")[-1]: r["type"] for r in state_resources(project)}
    assert not [name for name in left if name.split("-")[0] in TEARDOWN_MODELS], left
    assert f"platform-{NGC_STACK_SECRET}" not in left, left
    for kept in ("platform-namespace", "platform-teardown-serviceaccount", "platform-teardown-role",
                 "platform-teardown-rolebinding"):
        assert kept in left, left

    def nothing_left() -> bool:
        # The operator's Deployments and Services go with the garbage collector (owned by the NIMService).
        found = {
            "nimcaches": names("nimcaches"),
            "nimservices": names("nimservices"),
            "deployments": sorted(d.metadata.name for d in apps.list_namespaced_deployment(ns).items),
            "services": sorted(s.metadata.name for s in core.list_namespaced_service(ns).items),
            "networkpolicies": sorted(p.metadata.name for p in kube.NetworkingV1Api().list_namespaced_network_policy(ns).items),
            "secrets": [s.metadata.name for s in core.list_namespaced_secret(ns).items if s.metadata.name == NGC_STACK_SECRET],
        }
        nothing_left.last = {kind: found_names for kind, found_names in found.items() if found_names}
        return not nothing_left.last

    try:
        wait_for(nothing_left, 60, "no model object in the namespace")
    except AssertionError as error:
        raise AssertionError(f"{error}: {getattr(nothing_left, 'last', None)}") from None
    assert kube.RbacAuthorizationV1Api().read_namespaced_role(TEARDOWN_IDENTITY, ns)
