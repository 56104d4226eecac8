"""RequestRouter: the LLM request router in front of the models.

Thin: the manifests come from ``components.compile.router``; this class hands them to
pulumi-kubernetes with ``parent=self`` and wires the order:

    backend ServiceAccount, Role ─▶ RoleBinding ─▶ backend Deployment ─▶ backend Service ─┐
    RequiredCrds ─▶ Issuer ─▶ Certificate ─────────────────────────────────────────────────┤
    (RequiredCrds, backend Service ─▶ ServiceMonitor)                                      │
    headless Service, workload-kind guard, the fronted models ─────────────────────────────┴▶ router workload ─▶ Service, PDB,
                                                                                                                 RouterTargets

Workload kind: the router workload is always the child ``<name>-workload``; its Pulumi type is
its kind, so a kind switch is a different resource: the preview shows a create of the new kind
and a delete of the old one (Pulumi creates first and deletes last, so the old pods serve until
the new ones are ready). There is deliberately no alias between the two types: an alias would
present a replacement as an update. The ``WorkloadKindGuard`` records the deployed kind in the
stack state and fails the preview when the kind changes without ``workload.migrateFrom`` naming
the deployed kind, whether the change came from an edit or from a changed default.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pulumi

from ..compile.router import compile_router, endpoint_url, fronted_services, required_crds
from ..config.router import fronted_models
from ..config.model import StackConfig
from .. import children as roles
from ..children import child as child_name
from . import kubernetes as kube_resources
from .model import Deploy
from providers.props import (
    ClusterTarget, CrdRequirement, RequiredCrdsProps, RouterTargetsProps, WorkloadKindProps,
)
from providers.resources import RequiredCrds, RouterTargets, WorkloadKindGuard
from providers.router_guard import WorkloadKindGuardProvider

class RequestRouter(pulumi.ComponentResource):
    """The router workload (Deployment or StatefulSet), its Services and, when the topology
    needs it, the backend router with its EndpointSlice-only RBAC; TLS through cert-manager."""

    endpoint_url: pulumi.Output[str]
    workload_kind: pulumi.Output[str]

    def __init__(self, stack: StackConfig, deploy: Deploy, fronts: Sequence[pulumi.Resource] = (),
                 opts: Optional[pulumi.ResourceOptions] = None):
        router = stack.router
        if router is None:
            raise ValueError("the stack declares no router (llm-serving:router)")
        name = router.name
        super().__init__("llm-serving:index:RequestRouter", name, None, opts)
        manifests = compile_router(stack)
        names, topology = manifests.names, manifests.topology
        child = pulumi.ResourceOptions(parent=self, provider=deploy.provider)

        def after(*deps: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(deps)))

        base = tuple(deploy.depends_on)
        cluster = ClusterTarget.of(deploy.cluster)
        workload_after: list[pulumi.Resource] = list(base)
        # Another operator's kinds (cert-manager, Prometheus Operator) wait for the check that
        # the cluster serves them: without it, preview stops with the setting and the fix.
        crd_check: tuple[pulumi.Resource, ...] = ()
        self.crd_check = self.targets = None
        requirements = required_crds(manifests)
        if requirements and not deploy.rendering:
            from providers.crd_check import RequiredCrdsProvider

            self.crd_check = RequiredCrds(child_name(name, roles.ROUTER_CRD_CHECK), RequiredCrdsProps(
                f"router {name}", tuple(CrdRequirement.from_dict(r) for r in requirements), cluster,
            ).to_dict(), RequiredCrdsProvider(), after(*base))
            crd_check = (self.crd_check,)
        if manifests.backend_deployment is not None:
            account = kube_resources.apply(child_name(name, roles.BACKEND_SERVICE_ACCOUNT), manifests.backend_service_account, after(*base))
            role = kube_resources.apply(child_name(name, roles.BACKEND_ROLE), manifests.backend_role, after(*base))
            binding = kube_resources.apply(child_name(name, roles.BACKEND_ROLE_BINDING), manifests.backend_role_binding, after(account, role))
            backend = kube_resources.apply(child_name(name, roles.BACKEND), manifests.backend_deployment, after(binding))
            backend_service = kube_resources.apply(child_name(name, roles.BACKEND_SERVICE), manifests.backend_service, after(backend))
            kube_resources.apply(child_name(name, roles.BACKEND_PDB), manifests.backend_pod_disruption_budget, after(backend))
            if manifests.service_monitor is not None:
                kube_resources.apply(child_name(name, roles.BACKEND_SERVICE_MONITOR), manifests.service_monitor,
                                     after(backend_service, *crd_check))
            workload_after.append(backend_service)
        if manifests.certificate is not None:
            issued_by: tuple[pulumi.Resource, ...] = crd_check or base
            if manifests.issuer is not None:
                issued_by = (kube_resources.apply(child_name(name, roles.ROUTER_ISSUER), manifests.issuer, after(*(crd_check or base))),)
            workload_after.append(kube_resources.apply(child_name(name, roles.ROUTER_CERTIFICATE), manifests.certificate, after(*issued_by)))
        if manifests.headless_service is not None:
            # Before the StatefulSet: its pods' DNS names come from this Service.
            workload_after.append(kube_resources.apply(child_name(name, roles.ROUTER_HEADLESS_SERVICE), manifests.headless_service, after(*base)))
        # State-only (no cluster access), so it runs in render mode too: a kind flip there is
        # worse, since `kubectl apply` of the rendered files never deletes the old kind.
        self.kind_guard = WorkloadKindGuard(child_name(name, roles.ROUTER_WORKLOAD_KIND), WorkloadKindProps(
            name, topology.kind, router.workload.migrate_from or "", "kind" in router.workload.model_fields_set,
        ).to_dict(), WorkloadKindGuardProvider(), after(*base))
        workload_after.append(self.kind_guard)
        self.workload = kube_resources.apply(child_name(name, roles.ROUTER_WORKLOAD), manifests.workload, after(*workload_after, *fronts))
        self.service = kube_resources.apply(child_name(name, roles.ROUTER_SERVICE), manifests.service, after(self.workload))
        if manifests.pod_disruption_budget is not None:
            kube_resources.apply(child_name(name, roles.ROUTER_PDB), manifests.pod_disruption_budget, after(self.workload))

        if not deploy.rendering:
            from providers.router_targets import RouterTargetsProvider

            # Read, not awaited: each fronted model already waited for its rollout. The models'
            # recorded targets are inputs, so whenever a model's status is re-recorded (a
            # rollout, a scale) the router's view is re-read with it, in the same `up`.
            self.targets = RouterTargets(child_name(name, roles.ROUTER_TARGETS), RouterTargetsProps(
                name, stack.platform.namespace, fronted_services(stack),
                tuple(front.status.targets for front in fronts if getattr(front, "status", None) is not None), cluster,
            ).to_dict(), RouterTargetsProvider(), after(self.workload))

        url = endpoint_url(stack)
        self.endpoint_url = pulumi.Output.from_input(url)
        self.workload_kind = pulumi.Output.from_input(topology.kind)
        self.outputs = {
            "endpoint_url": url,
            "workload_kind": topology.kind,
            "topology": topology.reason,
            "discovery": list(topology.discovery),
            "backend_router": topology.backend_router,
            "models": list(fronted_models(router, [m.name for m in stack.models])),
            "objects": {
                "workload": names.router,
                "service": names.router,
                **({"headless_service": names.headless} if topology.headless_service else {}),
                **({"backend_router": names.backend} if topology.backend_router else {}),
                **({"certificate": names.certificate, "tls_secret": names.tls_secret} if router.tls.enabled else {}),
            },
        }
        if not deploy.rendering:
            # Per fronted model, the pods the router forwards to; `pulumi refresh` re-reads them.
            self.outputs["targets"] = self.targets.targets
        self.register_outputs(self.outputs)
