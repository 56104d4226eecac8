"""components.resources.kubernetes: every manifest becomes a resource of the type the typed
pulumi-kubernetes class registers (so URNs and state match stacks deployed with the typed
classes), with the manifest's fields passed to the provider as they are."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.resources import kubernetes as kube_resources

TYPED = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("apps/v1", "StatefulSet"): k8s.apps.v1.StatefulSet,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
}


class Recorder(pulumi.runtime.Mocks):
    def __init__(self):
        self.registered: dict[str, tuple[str, dict]] = {}

    def new_resource(self, args):
        self.registered[args.name] = (args.typ, dict(args.inputs))
        return [f"{args.name}-id", dict(args.inputs)]

    def call(self, args):
        return {}


@pytest.fixture
def recorder():
    mocks = Recorder()
    pulumi.runtime.set_mocks(mocks, preview=True)
    return mocks


@pulumi.runtime.test
def test_each_kind_has_the_typed_class_type_and_the_manifest_as_inputs(recorder):
    declared = []
    for (api_version, kind), cls in TYPED.items():
        manifest = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ns"}}
        if kind == "ServiceAccount":
            manifest["automountServiceAccountToken"] = False
        if kind in ("Role", "ClusterRole"):
            manifest["rules"] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
        declared.append(kube_resources.apply(f"ours-{kind}", manifest))
        required = {"role_ref": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"}} \
            if kind == "RoleBinding" else {}
        declared.append(cls(f"typed-{kind}", metadata=manifest["metadata"], **required))

    def check(_):
        for (_api_version, kind) in TYPED:
            ours_type, ours_inputs = recorder.registered[f"ours-{kind}"]
            assert ours_type == recorder.registered[f"typed-{kind}"][0]
            assert ours_inputs["metadata"] == {"name": "x", "namespace": "ns"}
        assert recorder.registered["ours-ServiceAccount"][1]["automountServiceAccountToken"] is False
        assert recorder.registered["ours-Role"][1]["rules"][0]["verbs"] == ["get"]

    return pulumi.Output.all(*[r.id for r in declared]).apply(check)


def test_type_token_names_the_core_group():
    assert kube_resources.type_token({"apiVersion": "v1", "kind": "Service"}) == "kubernetes:core/v1:Service"
    assert kube_resources.type_token({"apiVersion": "apps/v1", "kind": "Deployment"}) == "kubernetes:apps/v1:Deployment"
    assert (kube_resources.type_token({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor"})
            == "kubernetes:monitoring.coreos.com/v1:ServiceMonitor")
