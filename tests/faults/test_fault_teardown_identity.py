"""The shipped teardown identity (`platform.teardownIdentity`) can tear the models down on the real
engine, and can delete nothing else.

A stack with the identity on, a stack secret (`hfToken`, so the stack owns the Secret
`llm-serving-hf-token`) and two NetworkPolicy-isolated vLLM models is deployed, under the policy
pack, with a kubeconfig file of its own (the Kubernetes provider uses the kubeconfig *path*
recorded at `up`); then that file is switched to a token of the stack's own ServiceAccount
`llm-serving-teardown`, bound to the Role the stack itself compiled and applied (no hand-written
rules), and the models are removed as that identity: `pulumi destroy --target <each model
component> --target <the Secret> --target-dependents`. (`models: []` with `pulumi up` is not a
teardown: it would also rewrite the Role, which the identity may not patch.) NIM objects are in
the Role when the stack has NIM models but are not exercised here.

What the identity covers: what the models own — the weights PVCs, puller Jobs, Deployments (their
ReplicaSets and pods go with them: the provider deletes in the foreground and the garbage
collector removes the dependents), Services, NetworkPolicies (`platform.networkPolicy`), the NIM
operator's NIMCaches/NIMServices (NIM models), and the Secrets the stack makes from its stack
secrets, by name. Not covered, on purpose: the namespace, the models' ServiceAccount and the
teardown ServiceAccount/Role/RoleBinding themselves, which a full `pulumi destroy` also deletes —
an identity allowed to delete those could delete its own limits; that is the namespace owner's job.
The status records and weights gates (dynamic providers) call no API on delete.

What pulumi-kubernetes 4.25 does to delete one object (pkg/await.Deletion), and so what the Role
must grant: DELETE by name (foreground propagation), GET by name (is it gone yet?), and a
namespace-wide informer — an unfiltered list + watch, no `metadata.name` field selector — on the
object's resource, whose cache sync the await waits for on the provider's lifetime. Deployments
and Jobs carry `pulumi.com/skipAwait` and skip the wait; Services, PVCs, NetworkPolicies and
Secrets do not. An Event informer runs beside it, in the background: the Role needs no `events`
(nor `replicasets`). Hence the Secrets rules: get/delete limited to the stack's Secrets by
resourceNames, list/watch on every Secret of the namespace. Measured here: with list/watch
limited by resourceNames the destroy deletes the Secret and then hangs until killed (the state
keeps it); without get by name it logs `cannot get resource "secrets"` and finishes only because
the informer listed the Secret while the garbage collector still held it (foreground deletion) —
a race, so the test fails on any `forbidden` in the output.
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

from components.compile.rbac import compile_teardown_identity
from components.config import load_stack_config
from testkit.harness import REPO, small_model, stack_config

pytestmark = [pytest.mark.integration, pytest.mark.faults]

TOKEN = "hf_TeardownIdentityProbe"
STACK_SECRET = "llm-serving-hf-token"
FOREIGN_SECRET = "team-registry"  # in the namespace, not the stack's: teardown must not reach it
IDENTITY = "llm-serving-teardown"
MODELS = ("alpha", "beta")
# The destroy takes ~2 s; a hang (an informer that cannot list) is killed well before the
# provider's own 10-minute delete timeout.
DESTROY_TIMEOUT = 60


def config(namespace: str) -> dict:
    return stack_config(namespace, [small_model(name) for name in MODELS],
                        teardownIdentity={"enabled": True},
                        networkPolicy={"enabled": True, "allowFrom": []})


def normalized(rules) -> Counter:
    return Counter((frozenset(r.get("apiGroups") or []), frozenset(r.get("resources") or []),
                    frozenset(r.get("verbs") or []), frozenset(r.get("resourceNames") or [])) for r in rules)


def allowed(cluster, namespace: str, verb: str, resource: str, name: str = "", group: str = "") -> bool:
    """Whether the API server's authorizer lets the teardown identity do ``verb`` (a review as admin)."""
    from kubernetes import client

    review = client.AuthorizationV1Api(cluster.core.api_client).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{namespace}:{IDENTITY}",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
                 "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group,
                                        "resource": resource, "name": name}},
    })
    return bool(review.status.allowed)


def _plugins_of(root: Path) -> list[int]:
    """Processes running in the project copy: the plugins of its pulumi command (each in a
    process group of its own, so killing the command's group leaves them behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == root:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def run_killable(project, *args: str, timeout: float) -> tuple[int, str, float]:
    """A pulumi command, killed with its plugins if it hangs."""
    started = time.monotonic()
    process = subprocess.Popen(project.command(*args), cwd=project.root, env=project.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        for pid in _plugins_of(Path(project.root).resolve()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        output, _ = process.communicate()
        output += f"\n[killed after {timeout:.0f} s: the destroy hung]"
    return process.returncode, output, time.monotonic() - started


@pytest.fixture(scope="module")
def deployed(fault_project, cluster, scratch):
    kubeconfig = scratch / "teardown.kubeconfig"
    kubeconfig.write_text(open(cluster.kubeconfig).read())
    project = fault_project(config)
    project.env["KUBECONFIG"] = str(kubeconfig)
    project.run("config", "set", "--secret", "hfToken", TOKEN)
    started = time.monotonic()
    # Under the policy pack, every rule mandatory (its default; config.example.json makes
    # teardown-least-privilege advisory): the rbac rules accept the compiled Role beside the real
    # Secret resource.
    result = project.up("--policy-pack", "policies")
    version = yaml.safe_load((REPO / "policies" / "PulumiPolicy.yaml").read_text())["version"]
    assert f"llm-serving@v{version}" in result.stdout + result.stderr, "the pack did not run"
    print(f"\nteardown identity: up {time.monotonic() - started:.1f} s")
    from kubernetes import client

    cluster.core.create_namespaced_secret(project.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=FOREIGN_SECRET), string_data={"token": "not-the-stacks"}))
    return project, kubeconfig


def test_the_cluster_holds_the_role_the_stack_compiled(deployed, cluster):
    project, _ = deployed
    role = cluster.rbac.read_namespaced_role(IDENTITY, project.namespace)
    live = [{"apiGroups": r.api_groups, "resources": r.resources, "verbs": r.verbs, "resourceNames": r.resource_names}
            for r in role.rules]
    compiled = next(m for m in compile_teardown_identity(load_stack_config(
        {**config(project.namespace), "hfToken": {"secure": "v1:x"}})) if m["kind"] == "Role")
    assert normalized(live) == normalized(compiled["rules"])
    named = [r for r in live if r["resourceNames"]]
    assert named == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "delete"],
                      "resourceNames": [STACK_SECRET]}], live


def test_the_identity_reaches_the_stacks_secret_only(deployed, cluster):
    ns = deployed[0].namespace
    assert allowed(cluster, ns, "delete", "secrets", STACK_SECRET)
    assert allowed(cluster, ns, "get", "secrets", STACK_SECRET)
    assert not allowed(cluster, ns, "get", "secrets", FOREIGN_SECRET)
    assert not allowed(cluster, ns, "delete", "secrets", FOREIGN_SECRET)
    assert not allowed(cluster, ns, "delete", "serviceaccounts", IDENTITY)
    assert not allowed(cluster, ns, "delete", "roles", IDENTITY, group="rbac.authorization.k8s.io")
    assert not allowed(cluster, ns, "create", "deployments", group="apps")
    assert not allowed(cluster, ns, "patch", "secrets", STACK_SECRET)
    # The known limit: the delete await's informer needs every Secret listed, data included.
    assert allowed(cluster, ns, "list", "secrets") and allowed(cluster, ns, "watch", "secrets")


def test_the_shipped_identity_tears_the_models_down(deployed, cluster):
    project, kubeconfig = deployed
    ns = project.namespace
    resources = project.resources()
    models = [r["urn"] for r in resources if r["type"] == "llm-serving:index:VllmModel"]
    secret = [r["urn"] for r in resources if r["type"] == "kubernetes:core/v1:Secret"]
    assert len(models) == len(MODELS) and len(secret) == 1, [r["urn"] for r in resources]
    assert cluster.core.read_namespaced_secret(STACK_SECRET, ns)  # control: it is there to delete

    cluster.token_kubeconfig(kubeconfig, ns, IDENTITY)  # the same path, the shipped identity
    targets = [arg for urn in (*models, *secret) for arg in ("--target", urn)]
    code, output, seconds = run_killable(project, "destroy", "--yes", "--skip-preview", "--target-dependents",
                                         *targets, timeout=DESTROY_TIMEOUT)
    print(f"\nteardown identity: targeted destroy {seconds:.1f} s")
    assert code == 0, output[-5000:]
    # A refused call the provider shrugs off (a GET while awaiting a delete) is still a missing verb.
    assert "forbidden" not in output, output[-5000:]

    left = {r["urn"].split("::")[-1]: r["type"] for r in project.resources()}
    model_parts = [name for name in left if name.split("-")[0] in MODELS]
    assert not model_parts and "platform-llm-serving-hf-token" not in left, left
    # Outside the models, and not the identity's job: still in the state (and the cluster).
    for kept in ("platform-namespace", "platform-model-service-account", "platform-teardown-serviceaccount",
                 "platform-teardown-role", "platform-teardown-rolebinding"):
        assert kept in left, left

    def nothing_left():  # pods and ReplicaSets go with the garbage collector, after the destroy
        selector = "app.kubernetes.io/part-of=llm-serving"
        found = {kind: names for kind, names in cluster.names(ns).items() if names}
        for kind, items in (
            ("pod", cluster.core.list_namespaced_pod(ns, label_selector=selector).items),
            ("replicaset", cluster.apps.list_namespaced_replica_set(ns, label_selector=selector).items),
        ):
            if items:
                found[kind] = [o.metadata.name for o in items]
        from kubernetes import client

        policies = client.NetworkingV1Api(cluster.core.api_client).list_namespaced_network_policy(ns).items
        if policies:
            found["networkpolicy"] = [p.metadata.name for p in policies]
        secrets = {s.metadata.name for s in cluster.core.list_namespaced_secret(ns).items}
        if STACK_SECRET in secrets:
            found["secret"] = [STACK_SECRET]
        nothing_left.last = found
        return not found

    try:
        cluster.wait("no model object in the namespace", nothing_left, timeout=60)
    except AssertionError as error:
        raise AssertionError(f"{error}: {nothing_left.last}") from None
    assert cluster.core.read_namespaced_secret(FOREIGN_SECRET, ns)  # not the stack's: untouched
    assert cluster.rbac.read_namespaced_role(IDENTITY, ns)
