"""The router's plan (components.compile.plan.router_plan), the gateway's children in it: the
roles ``components.children`` defines, waits on earlier children only, the manifests in the
order `render` writes them, and RequestRouter declaring exactly the plan, in its order, with its
waits (so `up`, `render` and the tests see one order)."""

from __future__ import annotations

import json

import pulumi
import pytest

import providers.resources as dynamic_resources
from components import children as roles
from components.children import child as child_name
from components.compile.gateway import compile_gateway
from components.compile.plan import EXTERNAL, FRONTS, PLATFORM, compile_stack, router_plan
from components.compile.router import compile_router
from components.config import load_stack_config
from contract.props import RequiredCrdsProps, RouterTargetsProps, WorkloadKindProps
from tests.support.component_kit import declare_stack, record_graph

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
MODELS = [
    {"name": "alpha", "source": {"repo": "org/alpha"}, "resources": {"memory": "8Gi"}},
    {"name": "beta", "source": {"repo": "org/beta"}, "resources": {"memory": "8Gi"}},
]
LIMITED_GATEWAY = {"apiKeys": {"secretName": "gateway-keys", "tenants": [
    {"name": "team-a", "rateLimit": {"requestsPerMinute": 600, "tokensPerMinute": 120000}},
    {"name": "team-b"},
]}}
CASES = {
    "plain": ({"image": ROUTER_IMAGE}, {}),
    "no-gateway": ({"image": ROUTER_IMAGE, "gateway": {"enabled": False}}, {}),
    # Every optional child: backend router, issued TLS, ServiceMonitors, policies, the limiter and
    # the gateway's metrics objects.
    "everything": ({"image": ROUTER_IMAGE, "replicas": 3, "metrics": {"serviceMonitor": True},
                    "tls": {"enabled": True}, "gateway": LIMITED_GATEWAY},
                   {"networkPolicy": {"enabled": True}, "metrics": {"enabled": True}}),
}


def stack_of(case: str):
    router, platform = CASES[case]
    return {"platform": {"sharedMemorySizeLimit": "1Gi", **platform}, "models": MODELS, "router": router}


@pytest.mark.parametrize("case", sorted(CASES))
def test_children_use_the_router_roles_and_wait_on_earlier_children_only(case):
    plan = router_plan(load_stack_config(stack_of(case)))
    seen: set[str] = set(EXTERNAL)
    children = plan.all_children
    for child in children:
        assert child.role in roles.ROUTER_ROLES, child.role
        # A wait on an optional child the config leaves out is dropped when declaring; never one
        # on a later child.
        later = {c.role for c in children[children.index(child):]}
        assert not set(child.after) & later, (child.role, child.after)
        assert (child.manifest is None) != (child.props is None), child.role
        seen.add(child.role)
    assert len(seen) == len(children) + len(EXTERNAL)  # each role once


@pytest.mark.parametrize("case", sorted(CASES))
def test_render_writes_the_router_and_the_gateway_in_the_plans_order(case):
    stack = load_stack_config(stack_of(case))
    plan = router_plan(stack)
    planned = [*plan.objects, *plan.gateway.objects]
    gateway = compile_gateway(stack)
    # Every object the compilers made for the router and the gateway is planned, once.
    compiled = [m for part in (compile_router(stack), gateway) if part is not None
                for m in vars(part).values() if isinstance(m, dict) and "kind" in m]
    if gateway is not None and gateway.limiter is not None:
        compiled += [m for m in vars(gateway.limiter).values() if isinstance(m, dict) and "kind" in m]
    def canonical(objects):
        return sorted(json.dumps(m, sort_keys=True) for m in objects)

    assert canonical(planned) == canonical(compiled)
    assert compile_stack(stack)[-len(planned):] == planned


def test_everything_is_planned_with_the_gateway_after_the_router_service():
    plan = router_plan(load_stack_config(stack_of("everything")))
    after = {c.role: c.after for c in plan.all_children}
    assert [c.role for c in plan.gateway.children] == [
        roles.GATEWAY_NETWORK_POLICY, roles.GATEWAY_CONFIG, roles.GATEWAY_LIMITER_NETWORK_POLICY,
        roles.GATEWAY_LIMITER, roles.GATEWAY_LIMITER_SERVICE, roles.GATEWAY, roles.GATEWAY_SERVICE,
        roles.GATEWAY_PDB, roles.GATEWAY_METRICS_SERVICE, roles.GATEWAY_SERVICE_MONITOR]
    assert after[roles.GATEWAY] == (roles.ROUTER_SERVICE, roles.GATEWAY_CONFIG, roles.GATEWAY_NETWORK_POLICY,
                                    roles.GATEWAY_LIMITER_SERVICE, roles.GATEWAY_CERTIFICATE)
    assert FRONTS in after[roles.ROUTER_WORKLOAD]
    assert [type(c.props) for c in plan.children if c.props is not None] == [
        RequiredCrdsProps, WorkloadKindProps, RouterTargetsProps]


def test_rendering_keeps_the_kind_guard_and_leaves_out_the_cluster_reads():
    plan = router_plan(load_stack_config(stack_of("everything")))
    rendered = {c.role: waits for c, waits in plan.declared(rendering=True)}
    assert roles.ROUTER_WORKLOAD_KIND in rendered
    assert roles.ROUTER_CRD_CHECK not in rendered and roles.ROUTER_TARGETS not in rendered
    # What waited on the CRD check waits on what it waited on.
    assert rendered[roles.ROUTER_ISSUER] == (PLATFORM,)
    on_cluster = dict((c.role, waits) for c, waits in plan.declared(rendering=False))
    assert on_cluster[roles.ROUTER_ISSUER] == (roles.ROUTER_CRD_CHECK,)


@pytest.fixture
def graph(monkeypatch):
    return record_graph(monkeypatch, (dynamic_resources, "WorkloadKindGuard"), (dynamic_resources, "RouterTargets"),
                        (dynamic_resources, "RequiredCrds"))


@pulumi.runtime.test
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_component_declares_the_plan_in_its_order_with_its_waits(graph, case):
    stack, declared = declare_stack(stack_of(case))
    graph.objects.update(declared.servers)
    router = declared.router
    fronts = [declared.servers[n] for n in router.plan.fronts]
    assert router.plan.fronts == ("alpha", "beta")
    name = stack.router.name
    external = {PLATFORM: list(declared.platform.ready), FRONTS: fronts}
    planned = list(router.plan.declared(rendering=False))
    assert [n for n in graph.opts if n.startswith(f"{name}-")] == [child_name(name, c.role) for c, _ in planned]
    for child, waits in planned:
        expected = [d for role in waits for d in (external[role] if role in external else [router.children[role]])]
        declared = graph.opts[child_name(name, child.role)]
        assert [id(d) for d in declared.depends_on] == [id(d) for d in expected], child.role
        assert declared.parent is router, child.role


def test_the_gateway_certificate_comes_before_the_gateway_pods_and_after_the_crd_check():
    """router.gateway.tls: the pods mount the Secret cert-manager writes for the Certificate, and
    the Certificate (a cert-manager kind) waits on the check that the cluster serves it."""
    stack = load_stack_config(stack_of("everything"))
    stack = stack.model_copy(update={"router": stack.router.model_copy(update={
        "gateway": stack.router.gateway.model_copy(update={"tls": type(stack.router.gateway.tls)(enabled=True)})})})
    plan = router_plan(stack)
    order = [c.role for c in plan.all_children]
    after = {c.role: c.after for c in plan.all_children}
    assert order.index(roles.ROUTER_CRD_CHECK) < order.index(roles.GATEWAY_ISSUER) \
        < order.index(roles.GATEWAY_CERTIFICATE) < order.index(roles.GATEWAY)
    assert after[roles.GATEWAY_ISSUER] == (roles.ROUTER_CRD_CHECK,)
    assert after[roles.GATEWAY_CERTIFICATE] == (roles.GATEWAY_ISSUER,)
    assert roles.GATEWAY_CERTIFICATE in after[roles.GATEWAY]
    assert plan.outputs["objects"]["gateway_tls_secret"]
