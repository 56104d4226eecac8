"""A multi-node NIM model (operator path, ``multiNode``) on the simulated cluster (issue 22, item 3).

There is no NIM operator here (its module is not served): the module installs its real CRDs
(vendored, see tests/support/real_crds.py), so the API server validates the NIMService we apply,
its ``multiNode`` included, against the operator's schema and CEL rules; the test then plays the
operator (tests/support/nim_operator.py): it writes the NIMCache/NIMService status and creates the
LeaderWorkerSet ``<name>-lws`` and the Service on its leaders as k8s-nim-operator v3.1.2 names and
shapes them. The **real** LWS controller (sigs.k8s.io/lws v0.8.0, started by
scripts/cluster/cluster.sh) creates the group's StatefulSets and pods on the fake GPU nodes, and the
status provider reads them.

In the file's order: `up` ends READY with the leader as the only target; the API server refuses,
under the operator's CEL, what the config refuses (mpi with ray, multiNode with autoscaling); a
deleted worker makes the controller recreate the group and `pulumi refresh` says so; a change of
``multiNode`` (immutable: the operator's webhook) stops at preview with the fix and changes
nothing; a second model whose group needs more GPUs than the nodes have free fails `up` with the
pending pod and its reason; destroy leaves nothing. KWOK plays the kubelet: what NIM, Ray or MPI do inside the pods is not proven here
(docs/multi-node.md).
"""

from __future__ import annotations

import copy

import pytest

from components.compile import nim as nim_compile
from components.config import load_stack_config
from testkit.harness import stack_config
from tests.support.fixture_crds import FixtureCrds, wait_for
from tests.support.nim_operator import (
    GROUP,
    LWS_GROUP,
    LWS_PLURAL,
    LWS_VERSION,
    VERSION,
    BackgroundUp,
    Operator,
    assert_kept,
    cli_status,
    output_text,
    status_record,
)
from tests.support.real_crds import NIM_CRDS_ABSENT, nim_operator_crds

NIM_FILES = nim_operator_crds()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(NIM_FILES is None, reason=NIM_CRDS_ABSENT)]
NIM_CRDS = FixtureCrds(NIM_FILES or [], "nim-operator-crds")
NIM_IMAGE = "nvcr.io/nim/meta/llama-3.1-405b-instruct:1.8.4"
MODEL = "nimduo"
LWS = f"{MODEL}-lws"  # the operator's name for it (GetLWSName)
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WAIT = 180


def nim_group(nodes: int = 2, gpus: int = 4, mode: str = "ray") -> dict:
    return {
        "name": MODEL, "engine": "nim", "path": "operator", "image": NIM_IMAGE,
        "source": {"repo": "meta-llama/Llama-3.1-405B-Instruct", "revision": "main"},
        "gpus": gpus, "tensorParallelSize": gpus, "resources": {"cpu": "1", "memory": "4Gi"},
        "weights": {"size": "1Gi", "accessMode": "ReadWriteMany"}, "nim": {"authSecret": "ngc-api"},
        "multiNode": {"nodes": nodes, "mode": mode},
    }


def config(namespace: str, model: dict | None = None) -> dict:
    return stack_config(namespace, [model or nim_group()])


def compiled(raw: dict) -> nim_compile.NimManifests:
    stack = load_stack_config(raw)
    return nim_compile.compile_nim_operator(stack.models[0], stack)


@pytest.fixture(scope="module", autouse=True)
def nim_crds(kube):
    """The operator's CRDs for the module, deleted when it ends (after its stack is destroyed), so
    every other module sees the cluster without them."""
    try:
        kube.ApiextensionsV1Api().read_custom_resource_definition(f"{LWS_PLURAL}.{LWS_GROUP}")
    except kube.exceptions.ApiException as error:
        pytest.fail(f"the cluster has no LeaderWorkerSet CRD ({error.status}): start it with "
                    "scripts/cluster/cluster.sh, which installs it and runs the LWS controller")
    cleanup = NIM_CRDS.absent_until_installed(kube, "a real NIM operator")
    next(cleanup)
    NIM_CRDS.install(kube)
    yield
    next(cleanup, None)


@pytest.fixture(scope="module")
def project(make_project, nim_crds):
    return make_project(config)


def group_pods(kube, namespace: str, name: str = LWS) -> list:
    listing = kube.CoreV1Api().list_namespaced_pod(namespace, label_selector=f"{NAME_LABEL}={name}")
    return [p for p in listing.items if p.metadata.deletion_timestamp is None]


def all_ready(pods: list) -> bool:
    return bool(pods) and all(any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
                              for p in pods)


def play_the_operator(kube, project, manifests: nim_compile.NimManifests, up: BackgroundUp) -> Operator:
    """Cache, render the group, and report NotReady until the LWS is Available, then Ready (the
    operator's isLeaderWorkerSetReady)."""
    operator = Operator(kube, project.namespace)
    names = manifests.names
    cache = operator.wait_created("nimcaches", names.cache, up)
    assert_kept(manifests.cache["spec"], cache["spec"])
    operator.cache_ready(names.cache)
    service = operator.wait_created("nimservices", names.service, up)
    # Accepted by the API server under the operator's schema and CEL, and stored whole.
    assert_kept(manifests.service["spec"], service["spec"])
    # The old group (a replaced NIMService's) goes with the garbage collector first.
    wait_for(lambda: operator.leader_worker_set(LWS) is None, WAIT, f"no LeaderWorkerSet {LWS} left", up.fail_if_ended)
    assert operator.render_group(service) == LWS
    operator.service_state(names.service, "NotReady", "NotReady", f'leaderworkerset "{LWS}" is not ready')
    return operator


# --- 1. up ends READY on the real LWS controller --------------------------------------------------

def test_up_renders_multinode_the_group_runs_on_the_lws_controller_and_status_is_ready(project, kube):
    namespace = project.namespace
    manifests = compiled(config(namespace))
    assert manifests.service["spec"]["multiNode"]["parallelism"] == {"tensor": 4, "pipeline": 2}
    with BackgroundUp(project) as up:
        operator = play_the_operator(kube, project, manifests, up)
        wait_for(lambda: operator.group_available(LWS), WAIT, f"LeaderWorkerSet {LWS} to be Available",
                 up.fail_if_ended)
        code, status = cli_status(project)
        assert (code, status[MODEL]["state"]) == (3, "PENDING"), status  # the operator still says NotReady
        assert not up.done(), "`pulumi up` must wait while the operator says NotReady"
        operator.service_state(MODEL, "Ready", "Ready", f'leaderworkerset "{LWS}" is ready', availableReplicas=1)
        result = up.result(WAIT)
    assert result.returncode == 0, output_text(result)[-6000:]

    # The controller made the leaders' StatefulSet, group 0's workers', and one 4-GPU pod each.
    sets = {s.metadata.name for s in kube.AppsV1Api().list_namespaced_stateful_set(namespace).items}
    assert sets == {LWS, f"{LWS}-0"}, sets
    pods = group_pods(kube, namespace)
    assert sorted(p.metadata.name for p in pods) == [f"{LWS}-0", f"{LWS}-0-1"]
    assert all(p.spec.containers[0].resources.limits["nvidia.com/gpu"] == "4" for p in pods)
    assert all(p.spec.node_name.startswith("gpu-node-") for p in pods)

    model = project.outputs()["models"][MODEL]
    assert model["objects"]["leader_worker_set"] == LWS
    assert model["status"]["state"] == "READY", model
    assert model["status"]["message"].startswith("serving: 1 routable leader(s), 1/1 groups of 2 pods ready"), model
    assert model["status"]["targets"] == [f"{LWS}-0"]  # the operator's Service selects leaders only
    project.run("preview", "--expect-no-changes")  # the stored NIMService (server defaults) is ours


def test_the_api_server_refuses_under_the_operators_cel_what_the_config_refuses(project, kube):
    """Our refusals mirror the CRD's rules: the live object, changed the two ways the config never
    renders it, is refused by the API server (a dry run: nothing is stored)."""
    custom = kube.CustomObjectsApi()
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, project.namespace, "nimservices", MODEL)

    def refused(change) -> str:
        body = copy.deepcopy(stored)
        change(body["spec"])
        with pytest.raises(kube.exceptions.ApiException) as caught:
            custom.replace_namespaced_custom_object(GROUP, VERSION, project.namespace, "nimservices", MODEL, body,
                                                    dry_run="All")
        assert caught.value.status == 422, caught.value
        return caught.value.body

    assert "mpi and ray are mutually exclusive" in refused(
        lambda spec: spec["multiNode"].update(mpi={"mpiStartTimeout": 300}))
    assert "autoScaling must be nil or disabled when multiNode is set" in refused(
        lambda spec: spec.update(scale={"enabled": True, "hpa": {"maxReplicas": 2}}))


def test_a_deleted_worker_recreates_the_group_and_refresh_says_so(project, kube):
    namespace = project.namespace
    leader_uid = next(p.metadata.uid for p in group_pods(kube, namespace) if p.metadata.name == f"{LWS}-0")
    kube.CoreV1Api().delete_namespaced_pod(f"{LWS}-0-1", namespace)

    def recreated() -> bool:
        pods = {p.metadata.name: p for p in group_pods(kube, namespace)}
        return (len(pods) == 2 and all_ready(list(pods.values())) and f"{LWS}-0" in pods
                and pods[f"{LWS}-0"].metadata.uid != leader_uid)

    wait_for(recreated, WAIT, "the LWS controller to recreate group 0 (a new leader and worker, both ready)")
    project.run("refresh", "--yes", "--skip-preview")
    outputs = status_record(project, MODEL)["outputs"]
    assert outputs["state"] == "READY", outputs
    assert f"recreated by the LWS controller: Worker pod {LWS}-0-1 failed, deleted leader pod {LWS}-0" \
        in outputs["message"], outputs


def test_a_multinode_change_is_refused_at_preview_and_nothing_changes(project, kube):
    """The operator's webhook refuses any change of spec.multiNode, and a same-name replacement
    cannot be previewed (the dry run lands on the live object: here the CRD's own rule refused
    `mpi` beside the stored `ray`). The change stops at preview with the fix; the NIMService stays."""
    before = Operator(kube, project.namespace).get("nimservices", MODEL)
    with project.config_for_now(config(project.namespace, nim_group(mode="mpi"))):
        preview = project.run("preview", check=False)
        up = project.up(check=False)
    for result in (preview, up):
        text = output_text(result)
        assert result.returncode != 0, text[-4000:]
        assert f"model {MODEL}: multiNode cannot change on a deployed NIMService" in text, text[-4000:]
        assert "keep models[].multiNode as deployed, or take the model down first" in text, text[-4000:]
    after = Operator(kube, project.namespace).get("nimservices", MODEL)
    assert after["spec"]["multiNode"] == before["spec"]["multiNode"] and "ray" in after["spec"]["multiNode"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    project.run("preview", "--expect-no-changes")  # the stack file says what is deployed again


# --- 2. more GPUs than the nodes have -------------------------------------------------------------

TRIO = "nimtrio"


def test_a_group_larger_than_the_free_gpus_fails_up_with_the_pending_pod_and_its_reason(project, kube):
    """A second model, three 8-GPU pods beside the first model's two 4-GPU pods on two 8-GPU
    nodes: the operator renders its group, a pod cannot schedule, and `up` stops with it."""
    trio = {**nim_group(nodes=3, gpus=8), "name": TRIO}
    # The failing `up` waits out the pending timeout: a short one here (the harness's 60 s is for
    # pods that do come up; the first model's are up already).
    raw = stack_config(project.namespace, [nim_group(), trio], pendingTimeoutSeconds=15)
    stack = load_stack_config(raw)
    manifests = nim_compile.compile_nim_operator(stack.models[1], stack)
    project.write_config(raw)
    lws = f"{TRIO}-lws"
    with BackgroundUp(project) as up:
        operator = Operator(kube, project.namespace)
        operator.wait_created("nimcaches", manifests.names.cache, up)
        operator.cache_ready(manifests.names.cache)
        service = operator.wait_created("nimservices", TRIO, up)
        assert_kept(manifests.service["spec"], service["spec"])
        assert operator.render_group(service) == lws
        operator.service_state(TRIO, "NotReady", "NotReady", f'leaderworkerset "{lws}" is not ready')
        result = up.result(600)
    text = output_text(result)
    assert result.returncode != 0, text[-6000:]
    assert f"model {TRIO} is ERROR: pod {lws}-0" in text, text[-6000:]
    assert "no node has enough free GPUs" in text and "reason: insufficient-gpus" in text, text[-6000:]
    pending = [p for p in group_pods(kube, project.namespace, lws) if p.status.phase == "Pending"]
    assert pending, "a pod of the three-node group must be left Pending"


def test_destroy_leaves_nothing(project, kube):
    namespace = project.namespace
    project.run("destroy", "--yes", "--skip-preview")
    custom, apps, core = kube.CustomObjectsApi(), kube.AppsV1Api(), kube.CoreV1Api()

    def left() -> dict:
        return {kind: found for kind, found in {
            "nimservices": custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "nimservices")["items"],
            "nimcaches": custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "nimcaches")["items"],
            "leaderworkersets": custom.list_namespaced_custom_object(LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL)["items"],
            "statefulsets": apps.list_namespaced_stateful_set(namespace).items,
            "pods": group_pods(kube, namespace) + group_pods(kube, namespace, f"{TRIO}-lws"),
            "services": [s for s in core.list_namespaced_service(namespace).items
                         if s.metadata.name in (MODEL, LWS, TRIO, f"{TRIO}-lws")],
        }.items() if found}

    wait_for(lambda: not left(), WAIT, "no NIM object, LeaderWorkerSet, StatefulSet, group pod or Service left")
    assert not left()
