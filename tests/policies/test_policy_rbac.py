"""RBAC rules: no wildcards, no cluster-admin, teardown verbs and scope (Secrets by name), backend-router scope."""

from __future__ import annotations

import pytest

from components.compile.plan import compile_stack
from components.config import load_stack_config
from policies.rules import rbac
from policies.rules.base import violations
from tests.support.policy_helpers import Case, check_case, compliant, messages, run


def _teardown(world):
    return world.one("Role", "teardown")


def _router_role(world):
    return world.one("Role", "backend-router")


def _rule_of(world, group, resource, named=False):
    """The teardown rule on ``group``/``resource`` (``named``: the one limited by resourceNames)."""
    (found,) = [rule for rule in _teardown(world)["rules"] if group in rule["apiGroups"]
                and resource in rule["resources"] and bool(rule.get("resourceNames")) == named]
    return found


def _all_secrets_back(world):
    """The Role before Secrets were limited: secrets beside pods, with every teardown verb."""
    rules = _teardown(world)["rules"]
    rules[:] = [rule for rule in rules if "secrets" not in rule["resources"]]
    rules[0]["resources"].append("secrets")


def _drop_verb(world, resource, verb):
    for rule in _teardown(world)["rules"]:
        if resource in rule["resources"]:
            if len(rule["resources"]) > 1:  # split the resource off with the reduced verbs
                rule["resources"].remove(resource)
                _teardown(world)["rules"].append({**rule, "resources": [resource],
                                                  "verbs": [v for v in rule["verbs"] if v != verb]})
            else:
                rule["verbs"].remove(verb)
            return


def _remove_nim_objects(world):
    world.remove(world.one("NIMService"))
    world.remove(world.one("NIMCache"))


def _bind_cluster_admin(kind):
    def mutate(world):
        binding = world.one("RoleBinding", "backend-router")
        binding["kind"] = kind
        binding["roleRef"].update(kind="ClusterRole", name="cluster-admin")
    return mutate


FAIL_CASES = [
    Case(rbac.no_wildcards, "verbs *", lambda w: _teardown(w)["rules"][0].update(verbs=["*"]),
         "rules[0].verbs contains '*'"),
    Case(rbac.no_wildcards, "resources *", lambda w: _router_role(w)["rules"][0].update(resources=["*"]),
         "rules[0].resources contains '*'"),
    Case(rbac.no_wildcards, "apiGroups *", lambda w: _teardown(w)["rules"][1].update(apiGroups=["*"]),
         "rules[1].apiGroups contains '*'"),
    Case(rbac.no_wildcards, "subresource wildcard", lambda w: _teardown(w)["rules"][0]["resources"].append("pods/*"),
         "'pods/*'"),
    Case(rbac.no_cluster_admin, "RoleBinding to cluster-admin", _bind_cluster_admin("RoleBinding"),
         "binds ClusterRole 'cluster-admin'"),
    Case(rbac.no_cluster_admin, "ClusterRoleBinding to cluster-admin", _bind_cluster_admin("ClusterRoleBinding"),
         "ClusterRoleBinding 'llm-router-backend-router-endpointslice-reader' binds ClusterRole 'cluster-admin'"),
    Case(rbac.no_cluster_admin, "pack config forbids admin too",
         lambda w: w.one("RoleBinding", "backend-router")["roleRef"].update(kind="ClusterRole", name="admin"),
         "binds ClusterRole 'admin'", config={"forbiddenClusterRoles": ["cluster-admin", "admin"]}),
    Case(rbac.teardown_verbs, "cannot delete pods", lambda w: _drop_verb(w, "pods", "delete"),
         "cannot delete on core pods"),
    Case(rbac.teardown_verbs, "cannot watch jobs", lambda w: _drop_verb(w, "jobs", "watch"),
         "cannot watch on batch jobs"),
    Case(rbac.teardown_verbs, "no nimcaches while NIM objects exist",
         lambda w: _drop_verb(w, "nimcaches", "list") or _drop_verb(w, "nimcaches", "get"),
         "cannot get/list on apps.nvidia.com nimcaches"),
    Case(rbac.teardown_verbs, "cannot delete the models' ServiceMonitors (platform.metrics)",
         lambda w: _drop_verb(w, "servicemonitors", "delete"),
         "cannot delete on monitoring.coreos.com servicemonitors"),
    Case(rbac.teardown_verbs, "cannot delete the multi-replica model's PodDisruptionBudget",
         lambda w: _drop_verb(w, "poddisruptionbudgets", "delete"),
         "cannot delete on policy poddisruptionbudgets"),
    Case(rbac.teardown_verbs, "resourceNames-limited rule cannot find everything",
         lambda w: _teardown(w)["rules"][2].update(resourceNames=["qwen-pull-1234"]), "on batch jobs"),
    Case(rbac.teardown_verbs, "the stack's Secret is not among the named ones",
         lambda w: _rule_of(w, "", "secrets", named=True).update(resourceNames=["registry-credentials"]),
         "cannot get/delete on core secrets 'llm-serving-hf-token'"),
    Case(rbac.teardown_verbs, "list/watch on Secrets limited by name: the delete await hangs",
         lambda w: _rule_of(w, "", "secrets").update(resourceNames=["llm-serving-hf-token"]),
         "cannot list/watch on core secrets namespace-wide"),
    Case(rbac.teardown_verbs, "cannot get the stack's Secret",
         lambda w: _rule_of(w, "", "secrets", named=True)["verbs"].remove("get"),
         "cannot get on core secrets 'llm-serving-hf-token'"),
    Case(rbac.teardown_least_privilege, "teardown may create", lambda w: _teardown(w)["rules"][1]["verbs"].append("create"),
         "rules[1] grants create"),
    Case(rbac.teardown_least_privilege, "teardown can read all Secrets", _all_secrets_back,
         "rules[0] grants get, delete on every Secret of the namespace"),
    Case(rbac.teardown_least_privilege, "teardown can get any Secret",
         lambda w: _rule_of(w, "", "secrets")["verbs"].append("get"),
         "grants get on every Secret of the namespace"),
    Case(rbac.teardown_least_privilege, "teardown reaches nodes",
         lambda w: _teardown(w)["rules"].append({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}),
         "covers core nodes, which no model owns"),
    Case(rbac.backend_router_scope, "router reads pods", lambda w: _router_role(w)["rules"][0]["resources"].append("pods"),
         "grants resources pods"),
    Case(rbac.backend_router_scope, "router may delete", lambda w: _router_role(w)["rules"][0]["verbs"].append("delete"),
         "grants verbs delete"),
    Case(rbac.backend_router_scope, "router role is cluster-wide",
         lambda w: _router_role(w).update(kind="ClusterRole"), "use a namespaced Role"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


@pytest.mark.parametrize("rule", [rbac.no_wildcards, rbac.no_cluster_admin, rbac.teardown_verbs,
                                  rbac.teardown_least_privilege, rbac.backend_router_scope], ids=lambda r: r.name)
def test_compiled_stack_passes(rule):
    assert run(rule, compliant()) == []


def test_teardown_needs_nim_verbs_only_when_nim_objects_exist():
    world = compliant()
    _remove_nim_objects(world)
    _teardown(world)["rules"].remove(_rule_of(world, "apps.nvidia.com", "nimcaches"))
    assert run(rbac.teardown_verbs, world) == []


def test_the_compiled_teardown_limits_get_and_delete_on_secrets_to_the_stacks_secret():
    named, everywhere = _rule_of(compliant(), "", "secrets", named=True), _rule_of(compliant(), "", "secrets")
    assert named["resourceNames"] == ["llm-serving-hf-token"] and set(named["verbs"]) == {"get", "delete"}
    assert set(everywhere["verbs"]) == {"list", "watch"}


def test_teardown_needs_no_secrets_rule_when_the_stack_declares_no_secret():
    world = compliant()
    world.remove(world.one("Secret"))
    rules = _teardown(world)["rules"]
    rules[:] = [rule for rule in rules if "secrets" not in rule["resources"]]
    assert run(rbac.teardown_verbs, world) == [] and run(rbac.teardown_least_privilege, world) == []


def test_the_old_all_secrets_rule_still_covers_teardown_but_fails_least_privilege():
    world = compliant()
    _all_secrets_back(world)
    assert run(rbac.teardown_verbs, world) == []
    assert run(rbac.teardown_least_privilege, world)


def test_teardown_split_across_role_and_cluster_role_counts_together():
    world = compliant()
    role = _teardown(world)
    nim_rule = _rule_of(world, "apps.nvidia.com", "nimcaches")
    role["rules"].remove(nim_rule)
    world.manifests.append({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "llm-serving-teardown-nim", "labels": {"app.kubernetes.io/component": "teardown"}},
        "rules": [nim_rule],
    })
    assert run(rbac.teardown_verbs, world) == []


def test_teardown_needs_scaledobject_verbs_once_a_model_is_autoscaled():
    world = compliant()
    assert run(rbac.teardown_verbs, world) == []
    autoscaled = load_stack_config({"platform": {"metrics": {"enabled": True}, "sharedMemorySizeLimit": "1Gi"}, "models": [
        {"name": "llama", "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}, "weights": {"accessMode": "ReadWriteMany"},
         "resources": {"memory": "8Gi"}, "autoscaling": {"enabled": True, "maxReplicas": 3}}]})
    world.manifests.append(next(m for m in compile_stack(autoscaled) if m["kind"] == "ScaledObject"))
    assert "cannot get/list/watch/delete on keda.sh scaledobjects" in messages(violations(run(rbac.teardown_verbs, world)))


def test_no_teardown_identity_means_nothing_to_check():
    world = compliant()
    world.remove(world.one("Role", "teardown"))
    assert run(rbac.teardown_verbs, world) == []


def test_wildcard_grants_count_for_coverage_but_fail_their_own_rule():
    world = compliant()
    _teardown(world)["rules"] = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    assert run(rbac.teardown_verbs, world) == []
    assert run(rbac.no_wildcards, world)


def test_cluster_scoped_backend_router_needs_an_explicit_pack_decision():
    # The router config renders a namespaced Role only (chart 0.16.2 backend-router-rbac.yaml);
    # a ClusterRole can still arrive by a hand edit of rendered YAML or another program.
    world = compliant()
    _router_role(world).update(kind="ClusterRole")
    assert "ClusterRole" in {m["kind"] for m in world.manifests}
    assert "allowClusterRole: true" in messages(run(rbac.backend_router_scope, world))
    assert run(rbac.backend_router_scope, world, {"allowClusterRole": True}) == []
    assert run(rbac.no_cluster_admin, world) == [] and run(rbac.no_wildcards, world) == []


def test_teardown_may_delete_the_network_policies_the_stack_declares():
    world = compliant()
    rule = {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
            "verbs": ["get", "list", "watch", "delete"]}
    _teardown(world)["rules"].append(rule)
    world.manifests.append({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "qwen-ingress", "namespace": "llm-serving"}, "spec": {"podSelector": {}},
    })
    assert run(rbac.teardown_least_privilege, world) == []
    assert run(rbac.teardown_verbs, world) == []
    _teardown(world)["rules"].remove(rule)
    assert any("networkpolicies" in f.message for f in run(rbac.teardown_verbs, world))
