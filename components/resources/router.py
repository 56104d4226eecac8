"""RequestRouter: the LLM request router in front of the models.

Thin, as a model's component: the plan (the router's children and the gateway's, their manifests
or typed props, what each waits on: ``components.compile.plan.router_plan``, the order drawn
there) is what `render` and the tests read too; ``declare_plan`` (the loop every component uses) hands
each child to pulumi-kubernetes or to its dynamic provider with ``parent=self``, in the plan's order. The gateway's children are
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

from contract.props import RouterTargetsProps

from .. import children as roles
from ..compile.plan import FRONTS, PLATFORM, RouterPlan, router_plan
from ..config.stack import StackConfig
from .declare import declare_plan
from .model import Deploy


def _with_fronted_targets(fronts: Sequence[pulumi.Resource]):
    """The router's targets read with the fronted models' recorded targets (Outputs: known here,
    not in the pure plan), so a model's re-recorded status re-reads the router's view in the same `up`."""
    def resolve(props):
        if not isinstance(props, RouterTargetsProps):
            return props
        return replace(props, fronted_targets=tuple(
            front.status.targets for front in fronts if getattr(front, "status", None) is not None))
    return resolve


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
        self.children: dict[str, pulumi.Resource] = declare_plan(
            name, self.plan.declared(deploy.rendering),
            pulumi.ResourceOptions(parent=self, provider=deploy.provider),
            {PLATFORM: tuple(deploy.depends_on), FRONTS: tuple(fronts)}, deploy.kubeconfig_content,
            resolve=_with_fronted_targets(fronts), fill=deploy.fill)
        self.crd_check = self.children.get(roles.ROUTER_CRD_CHECK)
        self.kind_guard = self.children[roles.ROUTER_WORKLOAD_KIND]
        self.workload = self.children[roles.ROUTER_WORKLOAD]
        self.service = self.children[roles.ROUTER_SERVICE]
        self.targets = self.children.get(roles.ROUTER_TARGETS)

        self.endpoint_url = pulumi.Output.from_input(deploy.filled(self.plan.endpoint_url))
        self.workload_kind = pulumi.Output.from_input(self.plan.workload_kind)
        self.outputs = deploy.filled(dict(self.plan.outputs))
        if self.targets is not None:
            # Per fronted model, the pods the router forwards to; `pulumi refresh` re-reads them.
            self.outputs["targets"] = self.targets.targets
        self.register_outputs(self.outputs)
