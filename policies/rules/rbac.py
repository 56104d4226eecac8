"""RBAC: least privilege for whatever identity runs in the cluster for these workloads.

Conventions (documented in docs/06-security.md): the identity that tears a model down is a Role or
ClusterRole labelled `app.kubernetes.io/component: teardown`; the backend router's is a Role
labelled `app.kubernetes.io/component: backend-router`. Serving and puller pods use a
ServiceAccount bound to nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

from .base import resource_rule, stack_rule
from .kube import (
    BACKEND_ROUTER,
    BINDING_KINDS,
    COMPONENT_LABEL,
    MODEL_LABEL,
    NIM_GROUP,
    NIM_KINDS,
    ROLE_KINDS,
    TEARDOWN,
    UNKNOWN,
    Finding,
    K8sObject,
    Stack,
    as_list,
    get,
    labelled,
    unchecked,
    violation,
)

RULE_FIELDS = ("apiGroups", "resources", "verbs")
TEARDOWN_VERBS = ("get", "list", "watch", "delete")
# What a model owns, as (API group, resource): what teardown must be able to find and delete.
TEARDOWN_OWNS = (
    ("", "pods"), ("", "services"), ("", "persistentvolumeclaims"),
    ("apps", "deployments"), ("batch", "jobs"),
)
TEARDOWN_OWNS_NIM = ((NIM_GROUP, "nimservices"), (NIM_GROUP, "nimcaches"))
# Owned only when the stack declares them (platform.networkPolicy).
TEARDOWN_OWNS_NETWORK = (("networking.k8s.io", "networkpolicies"),)
# Owned only when the stack declares them for its models (platform.metrics; the router's are not
# the teardown identity's).
TEARDOWN_OWNS_MONITORS = (("monitoring.coreos.com", "servicemonitors"),)
# Owned when the stack declares them for its models: budgets of multi-replica servers, KEDA
# ScaledObjects of autoscaled ones (the router's budgets are not the teardown identity's).
TEARDOWN_OWNS_BUDGETS = (("policy", "poddisruptionbudgets"),)
TEARDOWN_OWNS_SCALERS = (("keda.sh", "scaledobjects"),)
# Secrets: only those the stack declares, and get/delete only by name (resourceNames). list and
# watch must be namespace-wide: pulumi-kubernetes awaits a delete with an informer that lists and
# watches the whole namespace (no field selector); refused, its cache never syncs and the destroy
# hangs on the Secret. (So the identity can still read every Secret through a list.)
SECRETS = ("", "secrets")
SECRET_VERBS_BY_NAME = ("get", "delete")
SECRET_VERBS_ALL = ("list", "watch")
ROUTER_GROUP, ROUTER_RESOURCE, ROUTER_VERBS = "discovery.k8s.io", "endpointslices", ("get", "list", "watch")


def _group(group: str) -> str:
    return group or "core"


def role_rules(obj: K8sObject) -> tuple[list[tuple[int, dict]], list[Finding]]:
    """(index, rule) of a Role/ClusterRole, and what is unknown during preview."""
    rules = as_list(get(obj.props, "rules"))
    if rules is UNKNOWN:
        return [], [unchecked(f"{obj.display}: rules")]
    found, unknown = [], []
    for index, rule in enumerate(rules):
        fields = {key: as_list(get(rule, key)) for key in (*RULE_FIELDS, "resourceNames", "nonResourceURLs")}
        if rule is UNKNOWN or any(v is UNKNOWN or UNKNOWN in v for v in fields.values()):
            unknown.append(unchecked(f"{obj.display}: rules[{index}]"))
            continue
        found.append((index, {k: [x for x in v if isinstance(x, str)] for k, v in fields.items()}))
    return found, unknown


@resource_rule(
    "llm-serving-rbac-no-wildcards",
    "Roles list what they grant: no `*` in apiGroups, resources or verbs (a wildcard also grants "
    "every resource and verb added later).",
    ROLE_KINDS,
    fix="Name the API groups, resources and verbs the identity needs, e.g. {apiGroups: [apps], "
    "resources: [deployments], verbs: [get, list, watch, delete]}.",
    severity="high", url="https://kubernetes.io/docs/concepts/security/rbac-good-practices/",
)
def no_wildcards(obj: K8sObject, config: dict) -> Iterator[Finding]:
    rules, findings = role_rules(obj)
    yield from findings
    for index, rule in rules:
        for key in RULE_FIELDS:
            wild = [v for v in rule[key] if "*" in v]
            if wild:
                yield violation(f"{obj.display}: rules[{index}].{key} contains {', '.join(repr(w) for w in wild)}; "
                                f"list the {key} the identity needs")


@resource_rule(
    "llm-serving-rbac-no-cluster-admin",
    "Nothing is bound to cluster-admin (or another forbidden ClusterRole from the pack config).",
    BINDING_KINDS,
    fix="Bind a Role that grants only the verbs and resources the identity needs.",
    severity="critical", url="https://kubernetes.io/docs/concepts/security/rbac-good-practices/",
    config={"forbiddenClusterRoles": {
        "type": "array", "items": {"type": "string"}, "default": ["cluster-admin"],
        "description": "ClusterRoles no binding may reference.",
    }},
)
def no_cluster_admin(obj: K8sObject, config: dict) -> Iterator[Finding]:
    kind, name = get(obj.props, "roleRef", "kind"), get(obj.props, "roleRef", "name")
    if kind is UNKNOWN or name is UNKNOWN:
        yield unchecked(f"{obj.display}: roleRef")
    elif kind == "ClusterRole" and name in list(config["forbiddenClusterRoles"] or []):
        yield violation(f"{obj.display} binds ClusterRole '{name}'; bind a least-privilege Role instead")


def _teardown_roles(stack: Stack) -> tuple[list[tuple[Any, K8sObject]], list[Finding]]:
    roles, findings = [], []
    for resource, obj in stack.k8s_objects():
        if obj.kind not in ROLE_KINDS:
            continue
        component, unknown = labelled(obj, COMPONENT_LABEL, "component")
        findings.extend(unknown)
        if component == TEARDOWN:
            roles.append((resource, obj))
    return roles, findings


def _grants(rules: list[dict], group: str, resource: str, verb: str, name: Optional[str] = None) -> bool:
    """Whether ``rules`` grant ``verb``: on every object of the kind, or (``name``) on that one."""
    return any(
        # A rule limited to named objects cannot list or find them all: it counts for its names only.
        (not rule["resourceNames"] or (name is not None and name in rule["resourceNames"]))
        and (group in rule["apiGroups"] or "*" in rule["apiGroups"])
        and (resource in rule["resources"] or "*" in rule["resources"])
        and (verb in rule["verbs"] or "*" in rule["verbs"])
        for rule in rules
    )


def _declared_secrets(stack: Stack) -> tuple[list[str], list[Finding]]:
    """Names of the Secrets the stack declares (the ones teardown deletes), and unknown names."""
    names, unknown = [], []
    for resource, obj in stack.k8s_objects():
        if obj.kind != "Secret" or obj.group != "":
            continue
        name = get(obj.props, "metadata", "name")
        if name is UNKNOWN or not isinstance(name, str):
            unknown.append(unchecked(f"{obj.display}: metadata.name", resource.urn))
        else:
            names.append(name)
    return sorted(set(names)), unknown


@stack_rule(
    "llm-serving-rbac-teardown-verbs",
    "The teardown identity (Role/ClusterRole labelled app.kubernetes.io/component: teardown) can "
    "get/list/watch/delete everything a model owns: core pods, services, persistentvolumeclaims; "
    "apps deployments; batch jobs; apps.nvidia.com nimservices/nimcaches when the stack declares "
    "NIMService or NIMCache objects; networking.k8s.io networkpolicies when it declares "
    "NetworkPolicies; monitoring.coreos.com servicemonitors, policy poddisruptionbudgets and "
    "keda.sh scaledobjects when it declares a model's ServiceMonitor, PodDisruptionBudget or "
    "ScaledObject; and the Secrets the stack declares: get/delete on each by name (resourceNames "
    "may limit them to it) and list/watch on secrets namespace-wide, which pulumi-kubernetes' "
    "delete await needs (a resourceNames-limited list makes the destroy hang on the Secret). A "
    "missing verb makes a destroy 403 half-way and orphan objects.",
    fix="Add the missing verbs/resources to the teardown Role.",
    severity="medium",
)
def teardown_verbs(stack: Stack, config: dict) -> Iterator[Finding]:
    roles, findings = _teardown_roles(stack)
    yield from findings
    if not roles:
        return  # no teardown identity declared in this stack: nothing to check
    needed = list(TEARDOWN_OWNS)
    if any(obj.kind in NIM_KINDS for _, obj in stack.k8s_objects()):
        needed += TEARDOWN_OWNS_NIM
    if any(obj.kind == "NetworkPolicy" for _, obj in stack.k8s_objects()):
        needed += TEARDOWN_OWNS_NETWORK
    for kind, owns in (("ServiceMonitor", TEARDOWN_OWNS_MONITORS), ("PodDisruptionBudget", TEARDOWN_OWNS_BUDGETS),
                       ("ScaledObject", TEARDOWN_OWNS_SCALERS)):
        if any(obj.kind == kind and isinstance(obj.label(MODEL_LABEL), str) for _, obj in stack.k8s_objects()):
            needed += owns
    secrets, unknown_secrets = _declared_secrets(stack)
    granted: list[dict] = []
    undecided: list[Finding] = list(unknown_secrets)
    for resource, obj in roles:
        rules, unknown = role_rules(obj)
        granted.extend(rule for _, rule in rules)
        undecided.extend(Finding(f.message, resource.urn, True) for f in unknown)
    yield from undecided
    names = ", ".join(obj.display for _, obj in roles)
    urn = roles[0][0].urn

    def report(what: str, fix: str) -> Finding:
        if undecided:
            return unchecked(f"teardown identity ({names}): {what}", urn)
        return violation(f"teardown identity ({names}) cannot {what}; {fix}", urn)

    for group, resource in needed:
        missing = [verb for verb in TEARDOWN_VERBS if not _grants(granted, group, resource, verb)]
        if missing:
            yield report(f"{'/'.join(missing)} on {_group(group)} {resource}",
                         f"add a rule {{apiGroups: [\"{group}\"], resources: [\"{resource}\"], "
                         f"verbs: [{', '.join(TEARDOWN_VERBS)}]}}")
    if secrets or unknown_secrets:
        group, resource = SECRETS
        missing = [verb for verb in SECRET_VERBS_ALL if not _grants(granted, group, resource, verb)]
        if missing:
            yield report(
                f"{'/'.join(missing)} on core secrets namespace-wide",
                "pulumi-kubernetes awaits a Secret's delete with an informer that lists and watches "
                "every Secret of the namespace (a resourceNames-limited rule is refused for it, and "
                f"the destroy hangs); add a rule {{apiGroups: [\"\"], resources: [secrets], "
                f"verbs: [{', '.join(SECRET_VERBS_ALL)}]}}")
        for name in secrets:
            missing = [verb for verb in SECRET_VERBS_BY_NAME if not _grants(granted, group, resource, verb, name)]
            if missing:
                yield report(
                    f"{'/'.join(missing)} on core secrets '{name}'",
                    f"add '{name}' to the resourceNames of the rule {{apiGroups: [\"\"], resources: "
                    f"[secrets], resourceNames: [...], verbs: [{', '.join(SECRET_VERBS_BY_NAME)}]}}")


@resource_rule(
    "llm-serving-rbac-teardown-least-privilege",
    "The teardown identity grants nothing beyond get/list/watch/delete on what a model owns (core "
    "pods/services/persistentvolumeclaims/secrets, apps deployments, batch jobs, apps.nvidia.com "
    "nimservices/nimcaches, networking.k8s.io networkpolicies, monitoring.coreos.com "
    "servicemonitors, policy poddisruptionbudgets, keda.sh scaledobjects), and get/delete on "
    "secrets only by name: the stack owns only the Secrets it declares, not the namespace's other "
    "credentials.",
    ROLE_KINDS,
    fix="Remove other verbs (create, update, patch, ...) and other resources from the Role labelled "
    "app.kubernetes.io/component: teardown, and grant get/delete on secrets in a rule with "
    "resourceNames: [the stack's Secrets] (list/watch stay namespace-wide: the delete await needs "
    "them).",
    severity="high", url="https://kubernetes.io/docs/concepts/security/rbac-good-practices/",
    config={"allowedVerbs": {
        "type": "array", "items": {"type": "string"}, "default": list(TEARDOWN_VERBS),
        "description": "Verbs the teardown identity may hold.",
    }},
)
def teardown_least_privilege(obj: K8sObject, config: dict) -> Iterator[Finding]:
    component, findings = labelled(obj, COMPONENT_LABEL, "component")
    yield from findings
    if component != TEARDOWN:
        return
    allowed_verbs = set(config["allowedVerbs"] or [])
    owned = (set(TEARDOWN_OWNS) | set(TEARDOWN_OWNS_NIM) | set(TEARDOWN_OWNS_NETWORK) | set(TEARDOWN_OWNS_MONITORS)
             | set(TEARDOWN_OWNS_BUDGETS) | set(TEARDOWN_OWNS_SCALERS) | {SECRETS})
    rules, findings = role_rules(obj)
    yield from findings
    for index, rule in rules:
        extra_verbs = [v for v in rule["verbs"] if v not in allowed_verbs]
        if extra_verbs:
            yield violation(f"{obj.display}: rules[{index}] grants {', '.join(extra_verbs)}; teardown "
                            f"needs only {', '.join(sorted(allowed_verbs))}")
        extra = sorted(f"{_group(g)} {r}" for g in rule["apiGroups"] for r in rule["resources"]
                       if (g, r) not in owned)
        if extra:
            yield violation(f"{obj.display}: rules[{index}] covers {', '.join(extra)}, which no model "
                            "owns; remove them")
        if rule["nonResourceURLs"]:
            yield violation(f"{obj.display}: rules[{index}] grants nonResourceURLs; remove them")
        secrets_group, secrets_resource = SECRETS
        if secrets_group in rule["apiGroups"] and secrets_resource in rule["resources"] and not rule["resourceNames"]:
            by_name = [v for v in rule["verbs"] if v not in SECRET_VERBS_ALL and v in allowed_verbs]
            if by_name:
                yield violation(f"{obj.display}: rules[{index}] grants {', '.join(by_name)} on every Secret of "
                                "the namespace; grant them in a rule limited to the stack's Secrets "
                                "(resourceNames)")


@resource_rule(
    "llm-serving-rbac-backend-router-scope",
    "The backend router's Role (labelled app.kubernetes.io/component: backend-router) grants only "
    "get/list/watch on discovery.k8s.io endpointslices, in its namespace.",
    ROLE_KINDS,
    fix="Make it a namespaced Role (as the router component renders it) with the single rule "
    "{apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [get, list, watch]}; a "
    "cluster-wide ClusterRole needs pack config allowClusterRole: true, a decision made in "
    "review.",
    severity="high", url="https://kubernetes.io/docs/concepts/security/rbac-good-practices/",
    config={"allowClusterRole": {
        "type": "boolean", "default": False,
        "description": "Accept a ClusterRole (not rendered by the router component): EndpointSlices "
        "of every namespace become readable.",
    }},
)
def backend_router_scope(obj: K8sObject, config: dict) -> Iterator[Finding]:
    component, findings = labelled(obj, COMPONENT_LABEL, "component")
    yield from findings
    if component != BACKEND_ROUTER:
        return
    if obj.kind == "ClusterRole" and config["allowClusterRole"] is not True:
        yield violation(f"{obj.display}: a ClusterRole lets the backend router read EndpointSlices "
                        "of every namespace; use a namespaced Role, or "
                        "allow it explicitly in the pack config (allowClusterRole: true)")
    rules, findings = role_rules(obj)
    yield from findings
    for index, rule in rules:
        problems = []
        for key, allowed in (("apiGroups", (ROUTER_GROUP,)), ("resources", (ROUTER_RESOURCE,)),
                             ("verbs", ROUTER_VERBS)):
            extra = [v for v in rule[key] if v not in allowed]
            if extra:
                problems.append(f"{key} {', '.join(extra)}")
        if rule["nonResourceURLs"]:
            problems.append("nonResourceURLs")
        if problems:
            yield violation(f"{obj.display}: rules[{index}] grants {'; '.join(problems)}; the backend "
                            f"router may only {'/'.join(ROUTER_VERBS)} {ROUTER_GROUP} {ROUTER_RESOURCE}")

