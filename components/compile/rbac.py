"""The teardown identity: what an in-cluster runner of `pulumi destroy` (or a clean-up job) needs.

Exactly get/list/watch/delete on what a model owns — no create, no patch, no wildcard — and on
the NIM operator's resources whenever the stack has NIM models: upstream's engine-agnostic
teardown 403'd on a NIMService delete because the identity lacked that verb, and the whole
teardown stopped there.

Secrets are the exception to "everything of a kind": the stack owns only the Secrets it makes from
its stack secrets (``compile.secrets.stack_secrets``), so get and delete are limited to those names
(``resourceNames``), and a stack that makes none gets no Secrets rule at all. list and watch on
Secrets cannot be limited that way: pulumi-kubernetes (4.25) awaits every delete with a
namespace-wide informer on the deleted object's resource (an unfiltered list + watch, no
``metadata.name`` field selector), whose cache sync never finishes when the list is refused, so
`pulumi destroy` hangs on the Secret (tests/faults/test_fault_teardown_identity.py). Those two
verbs therefore cover every Secret of the namespace, and a list returns their data: the
resourceNames rule narrows what the identity can delete, not what it can read.
"""

from __future__ import annotations

from ..config.stack import StackConfig
from . import common
from .disruption import may_run_several
from .engines import SERVERS
from .router.network import keys_guard_router
from .secrets import stack_secrets

TEARDOWN_COMPONENT = "teardown"
TEARDOWN_VERBS = ["get", "list", "watch", "delete"]
OWNED = (
    ("", ["persistentvolumeclaims", "pods", "services"]),
    ("apps", ["deployments"]),
    ("batch", ["jobs"]),
)
OWNED_NETWORK_POLICIES = ("networking.k8s.io", ["networkpolicies"])  # platform.networkPolicy, apiKeys
OWNED_MONITORS = ("monitoring.coreos.com", ["servicemonitors"])  # platform.metrics, raw-path models
OWNED_BUDGETS = ("policy", ["poddisruptionbudgets"])  # models that may run several pods
OWNED_SCALERS = ("keda.sh", ["scaledobjects"])  # autoscaled models
# The stack's own Secrets, by name: get (the delete await's lookup: without it a Secret already
# gone when the informer starts is never seen deleted) and delete.
SECRET_VERBS_BY_NAME = ["get", "delete"]
# Namespace-wide, because the delete await's informer lists and watches without a field selector
# (a resourceNames-limited list is refused and the destroy hangs on the Secret).
SECRET_VERBS_ALL = ["list", "watch"]


def _labels() -> dict[str, str]:
    return {
        "app.kubernetes.io/component": TEARDOWN_COMPONENT,
        "app.kubernetes.io/part-of": common.PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def owned_secret_names(stack: StackConfig) -> list[str]:
    """The Secrets the stack creates (none when rendering: `render` never writes them)."""
    if stack.cluster.render_yaml_to_directory:
        return []
    return [secret.ref.name for secret in stack_secrets(stack)]


def teardown_rules(stack: StackConfig) -> list[dict]:
    owned = list(OWNED)
    # What an engine's models add (the NIM operator's resources), per engine the stack serves.
    served = {model.engine for model in stack.models}
    owned += [kinds for name, server in SERVERS.items() if name in served for kinds in server.owned]
    # The stack declares NetworkPolicies with the option, and the router's with API keys on.
    if stack.platform.network_policy.enabled or keys_guard_router(stack):
        owned.append(OWNED_NETWORK_POLICIES)
    if stack.platform.metrics.enabled and any(not model.on_operator for model in stack.models):
        owned.append(OWNED_MONITORS)
    if any(may_run_several(model) for model in stack.models):
        owned.append(OWNED_BUDGETS)
    if any(model.autoscaling.enabled for model in stack.models):
        owned.append(OWNED_SCALERS)
    rules = [{"apiGroups": [group], "resources": list(resources), "verbs": list(TEARDOWN_VERBS)}
             for group, resources in owned]
    secrets = owned_secret_names(stack)
    if secrets:
        rules += [
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": secrets,
             "verbs": list(SECRET_VERBS_BY_NAME)},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": list(SECRET_VERBS_ALL)},
        ]
    return rules


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
