"""The teardown identity: exactly get/list/watch/delete on what the models own."""

from __future__ import annotations

from components.compile.rbac import compile_teardown_identity
from components.config import load_stack_config

VLLM = {"name": "alpha", "source": {"repo": "org/alpha"}, "resources": {"memory": "32Gi"}}
NIM = {"name": "beta", "engine": "nim", "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3",
       "source": {"repo": "org/beta"}, "resources": {"memory": "32Gi"}}


def _stack(*models, enabled=True):
    return load_stack_config({"platform": {"teardownIdentity": {"enabled": enabled}}, "models": list(models)})


def _rules(stack) -> set[tuple[str, str, str]]:
    role = next(m for m in compile_teardown_identity(stack) if m["kind"] == "Role")
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


VERBS = ("get", "list", "watch", "delete")
OWNED = {("", "pods"), ("", "services"), ("", "persistentvolumeclaims"), ("", "secrets"),
         ("apps", "deployments"), ("batch", "jobs")}


def test_vllm_only_teardown_grants_exactly_the_owned_objects():
    assert _rules(_stack(VLLM)) == {(g, r, v) for g, r in OWNED for v in VERBS}


def test_nim_models_add_exactly_nimservices_and_nimcaches():
    nim = {("apps.nvidia.com", "nimservices"), ("apps.nvidia.com", "nimcaches")}
    assert _rules(_stack(VLLM, NIM)) == {(g, r, v) for g, r in OWNED | nim for v in VERBS}


def test_the_role_is_bound_to_its_own_service_account_only():
    objects = {m["kind"]: m for m in compile_teardown_identity(_stack(VLLM))}
    binding = objects["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "llm-serving-teardown"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llm-serving-teardown", "namespace": "llm-serving"}]
    assert objects["ServiceAccount"]["automountServiceAccountToken"] is False
    assert objects["Role"]["metadata"]["labels"]["app.kubernetes.io/component"] == "teardown"


def test_off_by_default():
    assert compile_teardown_identity(load_stack_config({"models": [VLLM]})) == []
