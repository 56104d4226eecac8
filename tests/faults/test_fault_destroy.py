"""(f) `pulumi destroy` with one object stuck: the others are still deleted and the error names the
stuck one.

The stuck object is a real RBAC 403: the destroy runs as a ServiceAccount whose Role may delete
everything the stack owns except the Service of model ``stuck``. The Kubernetes provider uses the
kubeconfig *path* recorded at `up` (the SDK reads $KUBECONFIG into the provider's inputs), so the
stack is deployed with a kubeconfig file of its own and the identity in that file is narrowed.

`pulumi destroy --continue-on-error` deletes everything that does not hold the stuck object up:
all of model ``other``; of ``stuck``, only its status record; the Service's dependencies (its
Deployment, gate, puller, volume, the namespace) stay until it goes, as destroy order requires.
Without the flag, the engine stops scheduling deletes at the first error, so what else goes
depends on timing: scripts that tear down stacks should pass it.
"""

from __future__ import annotations

import pytest

from testkit.harness import small_model, stack_config
from tests.support.fault_kit import assert_state_matches_cluster

pytestmark = [pytest.mark.integration, pytest.mark.faults]

READ = ["get", "list", "watch"]
# Everything a destroy of this stack calls, except deleting the Service "stuck".
RULES_BUT_ONE = [
    {"apiGroups": [""], "resources": ["persistentvolumeclaims", "serviceaccounts", "pods", "secrets"],
     "verbs": READ + ["delete"]},
    {"apiGroups": [""], "resources": ["services", "events"], "verbs": READ},
    {"apiGroups": [""], "resources": ["services"], "resourceNames": ["other"], "verbs": ["delete"]},
    {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": READ + ["delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": READ + ["delete"]},
]


def test_destroy_deletes_all_but_the_stuck_object_and_names_it(fault_project, cluster, scratch):
    kubeconfig = scratch / "destroy.kubeconfig"
    kubeconfig.write_text(open(cluster.kubeconfig).read())
    project = fault_project(lambda ns: stack_config(ns, [small_model("stuck"), small_model("other")]))
    project.env["KUBECONFIG"] = str(kubeconfig)
    project.up()
    ns = project.namespace
    other = project.outputs()["models"]["other"]["objects"]

    cluster.restricted_kubeconfig(kubeconfig, ns, RULES_BUT_ONE)  # the same path, a narrower identity
    stuck = project.timed("destroy", "--yes", "--skip-preview", "--continue-on-error")
    print(f"\n(f) destroy with a stuck Service: {stuck.seconds:.1f} s")
    assert stuck.returncode != 0
    diagnostics = stuck.output.split("Diagnostics:")[-1]
    assert "kubernetes:core/v1:Service (stuck-service):" in diagnostics, stuck.output[-5000:]
    assert 'services "stuck" is forbidden' in diagnostics
    assert diagnostics.count("error:") == 2, diagnostics  # "update failed" and the stuck one: nothing else

    # The provider does not await deletes (skipAwait) and deletes in the foreground: a Deployment
    # stays, marked for deletion, until the garbage collector has taken its pods, which on a
    # loaded machine takes seconds after destroy returns. Deleted is "gone within the wait".
    owned = (("pvc", "weights"), ("job", "puller"), ("deployment", "deployment"), ("service", "service"))
    live = gone(cluster, ns, "model other's objects", lambda live: [
        f"{kind} {other[key]}" for kind, key in owned if other[key] in live[kind]])
    assert "stuck" in live["service"]
    in_state = set(assert_state_matches_cluster(project, cluster))
    assert not any(name.startswith("other-") for name in in_state), in_state
    assert "stuck-service" in in_state
    assert "stuck-status" not in {r["urn"].split("::")[-1] for r in project.resources()}

    kubeconfig.write_text(open(cluster.kubeconfig).read())  # the permission is granted
    done = project.timed("destroy", "--yes", "--skip-preview")
    assert done.returncode == 0, done.output[-5000:]
    assert project.resources() == [] or all(r["type"].startswith("pulumi:") for r in project.resources())
    # The Namespace itself is retained on delete (components/resources/platform.py: users' own
    # Secrets in it survive); nothing the stack made is left in it.
    gone(cluster, ns, "every object of the stack", lambda live: [
        f"{kind} {name}" for kind in ("pvc", "job", "deployment", "service") for name in live[kind]])


def gone(cluster, namespace: str, what: str, leftover, timeout: float = 90) -> dict[str, list[str]]:
    """The namespace's objects once ``leftover`` (live objects -> what should not be there) finds
    nothing; fails after ``timeout`` naming what is still there."""
    seen: dict[str, list[str]] = {}

    def settled():
        nonlocal seen
        seen = cluster.names(namespace)
        return not leftover(seen)

    try:
        cluster.wait(f"{what} to be gone", settled, timeout=timeout, poll=0.5)
    except AssertionError as error:
        raise AssertionError(f"{error}; still there: {leftover(seen)}") from None
    return seen
