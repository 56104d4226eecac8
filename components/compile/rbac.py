"""The teardown identity: what an in-cluster runner of `pulumi destroy` (or a clean-up job) needs.

Exactly get/list/watch/delete on what a model owns — no create, no patch, no wildcard — and on
the NIM operator's resources whenever the stack has NIM models: upstream's engine-agnostic
teardown 403'd on a NIMService delete because the identity lacked that verb, and the whole
teardown stopped there.
"""

from __future__ import annotations

from ..config.model import StackConfig
from . import common

TEARDOWN_COMPONENT = "teardown"
TEARDOWN_VERBS = ["get", "list", "watch", "delete"]
OWNED = (
    ("", ["persistentvolumeclaims", "pods", "secrets", "services"]),
    ("apps", ["deployments"]),
    ("batch", ["jobs"]),
)
OWNED_NIM = ("apps.nvidia.com", ["nimcaches", "nimservices"])
OWNED_NETWORK_POLICIES = ("networking.k8s.io", ["networkpolicies"])  # platform.networkPolicy


def _labels() -> dict[str, str]:
    return {
        "app.kubernetes.io/component": TEARDOWN_COMPONENT,
        "app.kubernetes.io/part-of": common.PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def teardown_rules(stack: StackConfig) -> list[dict]:
    owned = list(OWNED)
    if any(model.engine == "nim" for model in stack.models):
        owned.append(OWNED_NIM)
    if stack.platform.network_policy.enabled:
        owned.append(OWNED_NETWORK_POLICIES)
    return [{"apiGroups": [group], "resources": list(resources), "verbs": list(TEARDOWN_VERBS)}
            for group, resources in owned]


def compile_teardown_identity(stack: StackConfig) -> list[dict]:
    identity = stack.platform.teardown_identity
    if not identity.enabled:
        return []
    namespace, name = stack.platform.namespace, identity.service_account_name
    meta = {"name": name, "namespace": namespace, "labels": _labels()}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta),
         "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
         "rules": teardown_rules(stack)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
    ]
