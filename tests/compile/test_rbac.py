"""The teardown identity: exactly get/list/watch/delete on what the models own, and on Secrets
get/delete by name on the stack's own Secrets only (list/watch namespace-wide: pulumi-kubernetes'
delete await needs them; tests/faults/test_fault_teardown_identity.py shows it on the cluster)."""

from __future__ import annotations

from components.compile.rbac import compile_teardown_identity
from components.config import load_stack_config

VLLM = {"name": "alpha", "source": {"repo": "org/alpha"}, "resources": {"memory": "32Gi"}}
NIM = {"name": "beta", "engine": "nim", "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3",
       "source": {"repo": "org/beta"}, "resources": {"memory": "32Gi"}}


SECRET = {"secure": "v1:unit-tests"}  # a stack secret as the stack file holds it


def _stack(*models, enabled=True, **secrets):
    return load_stack_config({"platform": {"teardownIdentity": {"enabled": enabled}}, "models": list(models), **secrets})


def _role(stack) -> dict:
    return next(m for m in compile_teardown_identity(stack) if m["kind"] == "Role")


def _rules(stack) -> set[tuple[str, str, str]]:
    """(group, resource, verb) granted on every object of the kind (rules without resourceNames)."""
    return {(g, r, v) for rule in _role(stack)["rules"] if not rule.get("resourceNames")
            for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def _named(stack) -> set[tuple[str, str, str, str]]:
    """(group, resource, name, verb) granted by resourceNames-limited rules."""
    return {(g, r, n, v) for rule in _role(stack)["rules"] if rule.get("resourceNames")
            for g in rule["apiGroups"] for r in rule["resources"] for n in rule["resourceNames"] for v in rule["verbs"]}


VERBS = ("get", "list", "watch", "delete")
OWNED = {("", "pods"), ("", "services"), ("", "persistentvolumeclaims"), ("apps", "deployments"), ("batch", "jobs")}
SECRETS_LISTED = {("", "secrets", "list"), ("", "secrets", "watch")}


def test_vllm_only_teardown_grants_exactly_the_owned_objects():
    assert _rules(_stack(VLLM)) == {(g, r, v) for g, r in OWNED for v in VERBS}
    assert _named(_stack(VLLM)) == set()  # no stack secret: no Secret is the stack's, no Secrets rule


def test_nim_models_add_exactly_nimservices_and_nimcaches():
    nim = {("apps.nvidia.com", "nimservices"), ("apps.nvidia.com", "nimcaches")}
    assert _rules(_stack(VLLM, NIM)) == {(g, r, v) for g, r in OWNED | nim for v in VERBS}


def test_secrets_get_and_delete_only_the_stacks_own_secrets_by_name():
    stack = _stack(VLLM, NIM, hfToken=SECRET, ngcApiKey=SECRET)
    nim = {("apps.nvidia.com", "nimservices"), ("apps.nvidia.com", "nimcaches")}
    assert _rules(stack) == {(g, r, v) for g, r in OWNED | nim for v in VERBS} | SECRETS_LISTED
    assert _named(stack) == {("", "secrets", name, verb) for name in ("llm-serving-hf-token", "llm-serving-ngc-api-key")
                             for verb in ("get", "delete")}


def test_only_the_secrets_a_model_reads_are_the_stacks():
    # ngcApiKey without a NIM model: the stack makes no Secret of it, so teardown may not touch one.
    stack = _stack(VLLM, hfToken=SECRET, ngcApiKey=SECRET)
    assert _named(stack) == {("", "secrets", "llm-serving-hf-token", verb) for verb in ("get", "delete")}
    own = {**VLLM, "hfTokenSecret": {"name": "team-hf", "key": "token"}}  # a Secret of the user's
    stack = _stack(own, hfToken=SECRET)
    assert _named(stack) == set() and _rules(stack) == {(g, r, v) for g, r in OWNED for v in VERBS}


def test_a_rendered_stack_owns_no_secret():
    stack = load_stack_config({"cluster": {"renderYamlToDirectory": "build/render"}, "hfToken": SECRET,
                               "platform": {"teardownIdentity": {"enabled": True}}, "models": [VLLM]})
    assert _named(stack) == set() and _rules(stack) == {(g, r, v) for g, r in OWNED for v in VERBS}


def test_the_role_is_bound_to_its_own_service_account_only():
    objects = {m["kind"]: m for m in compile_teardown_identity(_stack(VLLM))}
    binding = objects["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "llm-serving-teardown"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llm-serving-teardown", "namespace": "llm-serving"}]
    assert objects["ServiceAccount"]["automountServiceAccountToken"] is False
    assert objects["Role"]["metadata"]["labels"]["app.kubernetes.io/component"] == "teardown"


def test_off_by_default():
    assert compile_teardown_identity(load_stack_config({"models": [VLLM]})) == []
