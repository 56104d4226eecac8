"""RequestRouter: the LLM request router in front of the models.

Thin: the manifests come from ``components.compile.router``; this class hands them to
pulumi-kubernetes with ``parent=self`` and wires the order:

    NetworkPolicies, ServiceAccount + Role ─▶ RoleBinding ───────────────────────────────────┐
    RequiredCrds ─▶ Issuer ─▶ Certificate ──────────────────────────────────┬───────────────┤
    headless Service ─▶ backend SA/Role/Binding ─▶ backend Deployment ◀─────┘               │
                        backend Deployment ─▶ backend Service, PDB, ServiceMonitor ─────────┤
    workload-kind guard, the fronted models ────────────────────────────────────────────────┴▶ router workload
    router workload ─▶ Service ─▶ ServiceMonitor; PDB; RouterTargets
    gateway NetworkPolicy, ConfigMap, router Service ─▶ gateway Deployment ─▶ its Service, PDB
    ConfigMap ─▶ limiter Deployment ─▶ its Service ─▶ gateway Deployment (tenant limits)
    gateway Deployment ─▶ metrics Service ─▶ ServiceMonitor (platform.metrics)
    RequiredCrds ─▶ gateway Issuer ─▶ gateway Certificate ─▶ gateway Deployment (router.gateway.tls)

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
from typing import Optional

import pulumi

from contract.props import (
    ClusterTarget,
    CrdRequirement,
    RequiredCrdsProps,
    RouterTargetsProps,
    WorkloadKindProps,
)
from providers.crd_check import RequiredCrdsProvider
from providers.resources import RequiredCrds, RouterTargets, WorkloadKindGuard
from providers.router_guard import WorkloadKindGuardProvider
from providers.router_targets import RouterTargetsProvider

from .. import children as roles
from ..children import child as child_name
from ..compile.gateway import compile_gateway
from ..compile.gateway import endpoint_url as gateway_url
from ..compile.gateway import required_crds as gateway_required_crds
from ..compile.router import CHART, compile_router, endpoint_url, fronted_services, pylon_address, required_crds
from ..config.stack import StackConfig, fronted_models
from . import kubernetes as kube_resources
from .model import Deploy


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
        gateway = compile_gateway(stack)
        requirements = required_crds(manifests) + gateway_required_crds(gateway)
        if requirements and not deploy.rendering:
            self.crd_check = RequiredCrds(child_name(name, roles.ROUTER_CRD_CHECK), RequiredCrdsProps(
                f"router {name}", tuple(CrdRequirement.from_dict(r) for r in requirements), cluster,
            ).to_dict(), RequiredCrdsProvider(), after(*base))
            crd_check = (self.crd_check,)
        def apply(role: str, manifest: Optional[dict], *deps: pulumi.Resource) -> Optional[pulumi.Resource]:
            return None if manifest is None else kube_resources.apply(child_name(name, role), manifest, after(*deps))

        # Policies first: pods are never up without the isolation the stack asked for.
        for role, manifest in ((roles.ROUTER_NETWORK_POLICY, manifests.network_policy),
                               (roles.BACKEND_NETWORK_POLICY, manifests.backend_network_policy)):
            policy = apply(role, manifest, *base)
            if policy is not None:
                workload_after.append(policy)
        account = apply(roles.ROUTER_SERVICE_ACCOUNT, manifests.service_account, *base)
        if account is not None:
            role = apply(roles.ROUTER_ROLE, manifests.role, *base)
            workload_after.append(apply(roles.ROUTER_ROLE_BINDING, manifests.role_binding, account, role))
        # Before the router pods (their DNS discovery resolves it) and the backend router (which
        # watches its EndpointSlices).
        headless = apply(roles.ROUTER_HEADLESS_SERVICE, manifests.headless_service, *base)
        workload_after.append(headless)
        # The file the router reads once at start: there before the pods.
        lb_config = apply(roles.ROUTER_LB_CONFIG, manifests.lb_config, *base)
        if lb_config is not None:
            workload_after.append(lb_config)
        tls_ready: tuple[pulumi.Resource, ...] = ()
        if manifests.certificate is not None:
            issued_by: tuple[pulumi.Resource, ...] = crd_check or base
            if manifests.issuer is not None:
                issued_by = (apply(roles.ROUTER_ISSUER, manifests.issuer, *(crd_check or base)),)
            tls_ready = (apply(roles.ROUTER_CERTIFICATE, manifests.certificate, *issued_by),)
            workload_after.extend(tls_ready)
        if manifests.backend_deployment is not None:
            backend_account = apply(roles.BACKEND_SERVICE_ACCOUNT, manifests.backend_service_account, *base)
            backend_role = apply(roles.BACKEND_ROLE, manifests.backend_role, *base)
            binding = apply(roles.BACKEND_ROLE_BINDING, manifests.backend_role_binding,
                            *[r for r in (backend_account, backend_role) if r is not None])
            backend = apply(roles.BACKEND, manifests.backend_deployment, binding, headless, *tls_ready)
            backend_service = apply(roles.BACKEND_SERVICE, manifests.backend_service, backend)
            apply(roles.BACKEND_PDB, manifests.backend_pod_disruption_budget, backend)
            apply(roles.BACKEND_SERVICE_MONITOR, manifests.backend_service_monitor, backend_service, *crd_check)
            # The router's flags hand pylons the backend router's address.
            workload_after.append(backend_service)
        # State-only (no cluster access), so it runs in render mode too: a kind flip there is
        # worse, since `kubectl apply` of the rendered files never deletes the old kind.
        self.kind_guard = WorkloadKindGuard(child_name(name, roles.ROUTER_WORKLOAD_KIND), WorkloadKindProps(
            name, topology.kind, router.workload.migrate_from or "", "kind" in router.workload.model_fields_set,
        ).to_dict(), WorkloadKindGuardProvider(), after(*base))
        workload_after.append(self.kind_guard)
        self.workload = kube_resources.apply(child_name(name, roles.ROUTER_WORKLOAD), manifests.workload, after(*workload_after, *fronts))
        self.service = kube_resources.apply(child_name(name, roles.ROUTER_SERVICE), manifests.service, after(self.workload))
        apply(roles.ROUTER_PDB, manifests.pod_disruption_budget, self.workload)
        apply(roles.ROUTER_SERVICE_MONITOR, manifests.service_monitor, self.service, *crd_check)

        # The gateway starts after the router Service exists (nginx resolves its name at start);
        # the router Service itself is unchanged, so clients move to the gateway at their pace.
        if gateway is not None:
            gateway_policy = apply(roles.GATEWAY_NETWORK_POLICY, gateway.network_policy, *base)
            config = apply(roles.GATEWAY_CONFIG, gateway.config_map, *base)
            limiter_service = None
            if gateway.limiter is not None:
                # The replicas resolve the limiter's Service name at start, as the router's.
                limiter_policy = apply(roles.GATEWAY_LIMITER_NETWORK_POLICY, gateway.limiter.network_policy, *base)
                limiter = apply(roles.GATEWAY_LIMITER, gateway.limiter.deployment, config,
                                *[p for p in (limiter_policy,) if p is not None])
                limiter_service = apply(roles.GATEWAY_LIMITER_SERVICE, gateway.limiter.service, limiter)
            certificate = None
            if gateway.certificate is not None:
                # The Secret the pods mount is cert-manager's to write: the Certificate first.
                issuer = apply(roles.GATEWAY_ISSUER, gateway.issuer, *(crd_check or base))
                certificate = apply(roles.GATEWAY_CERTIFICATE, gateway.certificate,
                                    *([issuer] if issuer is not None else (crd_check or base)))
            deployment = apply(roles.GATEWAY, gateway.deployment, self.service, config,
                               *[p for p in (gateway_policy, limiter_service, certificate) if p is not None])
            apply(roles.GATEWAY_SERVICE, gateway.service, deployment)
            apply(roles.GATEWAY_PDB, gateway.pod_disruption_budget, deployment)
            metrics_service = apply(roles.GATEWAY_METRICS_SERVICE, gateway.metrics_service, deployment)
            if metrics_service is not None:
                apply(roles.GATEWAY_SERVICE_MONITOR, gateway.service_monitor, metrics_service, *crd_check)

        if not deploy.rendering:
            # Read, not awaited: each fronted model already waited for its rollout. The models'
            # recorded targets are inputs, so whenever a model's status is re-recorded (a
            # rollout, a scale) the router's view is re-read with it, in the same `up`.
            self.targets = RouterTargets(child_name(name, roles.ROUTER_TARGETS), RouterTargetsProps(
                name, stack.platform.namespace, fronted_services(stack),
                tuple(front.status.targets for front in fronts if getattr(front, "status", None) is not None), cluster,
            ).to_dict(), RouterTargetsProvider(), after(self.workload))

        url = gateway_url(stack) if gateway is not None else endpoint_url(stack)
        pylon = pylon_address(router, stack.platform.namespace)
        self.endpoint_url = pulumi.Output.from_input(url)
        self.workload_kind = pulumi.Output.from_input(topology.kind)
        self.outputs = {
            # What clients call: the gateway when it runs, else the router Service.
            "endpoint_url": url,
            "router_url": endpoint_url(stack),
            "workload_kind": topology.kind,
            # Which of the chart's topologies runs, and why.
            "topology": topology.name,
            "topology_reason": topology.reason,
            "chart": CHART,
            "discovery": list(topology.discovery),
            # What a model pod's pylon dials (--stargate-address).
            "pylon_address": pylon,
            "backend_router": topology.backend_router,
            "models": list(fronted_models(router, [m.name for m in stack.models])),
            "objects": {
                "workload": names.router,
                "service": names.router,
                "headless_service": names.headless,
                "service_account": names.service_account,
                **({"backend_router": names.backend} if topology.backend_router else {}),
                **({"gateway": gateway.names.gateway} if gateway is not None else {}),
                **({"gateway_tls_secret": gateway.names.tls_secret}
                   if gateway is not None and gateway.names.tls_secret else {}),
                **({"certificate": names.certificate} if router.tls.issued else {}),
                **({"tls_secret": names.tls_secret} if router.tls.enabled else {}),
            },
        }
        if not deploy.rendering:
            # Per fronted model, the pods the router forwards to; `pulumi refresh` re-reads them.
            self.outputs["targets"] = self.targets.targets
        self.register_outputs(self.outputs)
