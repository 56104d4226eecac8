"""RequestRouter: the LLM request router in front of the models.

Thin, as a model's component: the plan (the router's children and the gateway's, their manifests
or typed props, what each waits on: ``components.compile.plan.router_plan``, the order drawn
there) is what `render` and the tests read too; this class hands each child to pulumi-kubernetes
or to its dynamic provider with ``parent=self``, in the plan's order. The gateway's children are
this component's (``<router>-gateway*``), as before the plans: their URNs are unchanged.

The objects follow llm-request-router chart 0.16.2 (``components.compile.router.CHART``). An
update from the earlier render (port 8080, invented env) keeps every object's name and selector,
so the Deployment rolls (maxSurge 1, maxUnavailable 0) and the Service is patched in place; the
backend router's objects are renamed ``<name>-backend-router`` (the chart's name), which Pulumi
replaces create-before-delete.

Workload kind: the router workload is always the child ``<name>-workload``; its Pulumi type is
its kind, so a kind switch is a different resource: the preview shows a create of the new kind
and a delete of the old one (Pulumi creates first and deletes last, so the old pods serve until
the new ones are ready). There is deliberately no alias between the two types: an alias would
present a replacement as an update. The ``WorkloadKindGuard`` records the deployed kind in the
stack state and fails the preview when the kind changes without ``workload.migrateFrom`` naming
the deployed kind, whether the change came from an edit or from a changed default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Optional

import pulumi

from contract.props import RequiredCrdsProps, RouterTargetsProps, WorkloadKindProps
from providers.crd_check import RequiredCrdsProvider
from providers.resources import RequiredCrds, RouterTargets, WorkloadKindGuard
from providers.router_guard import WorkloadKindGuardProvider
from providers.router_targets import RouterTargetsProvider

from .. import children as roles
from ..children import child as child_name
from ..compile.plan import FRONTS, PLATFORM, Child, RouterPlan, router_plan
from ..config.stack import StackConfig
from . import kubernetes as kube_resources
from .cluster_access import with_kubeconfig
from .model import Deploy


def _dynamic(name: str, child: Child, fronts: Sequence[pulumi.Resource], opts: pulumi.ResourceOptions,
             kubeconfig_content: Optional[pulumi.Input[str]] = None):
    """The dynamic resource (and its provider) for a child's typed props. Looked up when called,
    so the component tests can record them."""
    props = child.props
    if isinstance(props, RouterTargetsProps):
        # The fronted models' recorded targets are Outputs: known here, not in the pure plan.
        props = replace(props, fronted_targets=tuple(
            front.status.targets for front in fronts if getattr(front, "status", None) is not None))
    resource, provider = {
        RequiredCrdsProps: (RequiredCrds, RequiredCrdsProvider),
        WorkloadKindProps: (WorkloadKindGuard, WorkloadKindGuardProvider),
        RouterTargetsProps: (RouterTargets, RouterTargetsProvider),
    }[type(props)]
    wire, opts = with_kubeconfig(props.to_dict(), kubeconfig_content, opts)
    return resource(name, wire, provider(), opts)


class RequestRouter(pulumi.ComponentResource):
    """The router workload (Deployment or StatefulSet), its Services and, when the topology
    needs it, the backend router with its EndpointSlice-only RBAC; TLS through cert-manager; the
    gateway in front (router.gateway)."""

    endpoint_url: pulumi.Output[str]
    workload_kind: pulumi.Output[str]

    def __init__(self, stack: StackConfig, deploy: Deploy, fronts: Sequence[pulumi.Resource] = (),
                 opts: Optional[pulumi.ResourceOptions] = None):
        if stack.router is None:
            raise ValueError("the stack declares no router (llm-serving:router)")
        name = stack.router.name
        super().__init__("llm-serving:index:RequestRouter", name, None, opts)
        self.plan: RouterPlan = router_plan(stack, deploy.cluster)
        child_opts = pulumi.ResourceOptions(parent=self, provider=deploy.provider)
        external = {PLATFORM: tuple(deploy.depends_on), FRONTS: tuple(fronts)}
        self.children: dict[str, pulumi.Resource] = {}
        for child, waits in self.plan.declared(deploy.rendering):
            depends = [d for role in waits for d in (external[role] if role in external else (self.children[role],))]
            opts_for = pulumi.ResourceOptions.merge(child_opts, pulumi.ResourceOptions(depends_on=depends))
            child_id = child_name(name, child.role)
            self.children[child.role] = (_dynamic(child_id, child, fronts, opts_for, deploy.kubeconfig_content)
                                         if child.props is not None
                                         else kube_resources.apply(child_id, child.manifest, opts_for))
        self.crd_check = self.children.get(roles.ROUTER_CRD_CHECK)
        self.kind_guard = self.children[roles.ROUTER_WORKLOAD_KIND]
        self.workload = self.children[roles.ROUTER_WORKLOAD]
        self.service = self.children[roles.ROUTER_SERVICE]
        self.targets = self.children.get(roles.ROUTER_TARGETS)

        self.endpoint_url = pulumi.Output.from_input(self.plan.endpoint_url)
        self.workload_kind = pulumi.Output.from_input(self.plan.workload_kind)
        self.outputs = dict(self.plan.outputs)
        if self.targets is not None:
            # Per fronted model, the pods the router forwards to; `pulumi refresh` re-reads them.
            self.outputs["targets"] = self.targets.targets
        self.register_outputs(self.outputs)
