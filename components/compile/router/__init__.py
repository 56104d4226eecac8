"""The request router (NVIDIA llm-request-router, "Stargate") and its backend router.

Pure: typed config in, wire-shape dicts out. The topology (which discovery, which objects) is
resolved by the config model (``RouterConfig.topology``); this package renders it the way
llm-request-router chart 0.16.2 does (see ``names.CHART``):

- ``names``: ports, paths, object names, labels, security contexts;
- ``flags``: the router's and backend router's command lines;
- ``workload``: router pods, workload, Services, PDB, ServiceAccount and Role;
- ``backend``: backend router, ServiceMonitors, TLS objects;
- ``lb``: the load-balancer file (``router.loadBalancer``) and its ConfigMap;
- ``network``: NetworkPolicies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...config.model import ModelConfig
from ...config.router import Topology
from ...config.stack import StackConfig, fronted_models
from .. import common, nim

# Where pylons call WatchStargates: defined once, beside the pylon that dials it.
from ..pylon import stargate_address as pylon_address
from .backend import (
    CERT_MANAGER_GROUP,
    ENDPOINTSLICE_RULE,
    compile_backend_deployment,
    compile_backend_service,
    compile_certificate,
    compile_self_signed_issuer,
    compile_service_monitor,
)
from .lb import compile_lb_config
from .names import (
    BACKEND_COMPONENT,
    CHART,
    HTTP_PORT,
    ROUTER_COMPONENT,
    RouterNames,
    in_cluster,
)
from .network import compile_backend_policy, compile_router_policy
from .workload import (
    POD_READER_RULE,
    compile_headless_service,
    compile_pdb,
    compile_role,
    compile_router_service,
    compile_router_workload,
    compile_service_account,
)

__all__ = [
    "CHART", "RouterManifests", "RouterNames", "compile_router", "endpoint_url", "fronted_services",
    "pylon_address", "required_crds",
]


@dataclass(frozen=True)
class RouterManifests:
    """The router's objects; ``None`` where the topology or config does not call for one."""

    topology: Topology
    names: RouterNames
    workload: dict
    service: dict
    headless_service: dict
    service_account: Optional[dict] = None
    role: Optional[dict] = None
    role_binding: Optional[dict] = None
    pod_disruption_budget: Optional[dict] = None
    backend_service_account: Optional[dict] = None
    backend_role: Optional[dict] = None
    backend_role_binding: Optional[dict] = None
    backend_deployment: Optional[dict] = None
    backend_service: Optional[dict] = None
    backend_pod_disruption_budget: Optional[dict] = None
    service_monitor: Optional[dict] = None
    backend_service_monitor: Optional[dict] = None
    issuer: Optional[dict] = None
    certificate: Optional[dict] = None
    network_policy: Optional[dict] = None
    backend_network_policy: Optional[dict] = None
    lb_config: Optional[dict] = None


def _fronted(stack: StackConfig) -> list[ModelConfig]:
    by_name = {m.name: m for m in stack.models}
    return [by_name[name] for name in fronted_models(stack.router, by_name)]


def fronted_services(stack: StackConfig) -> dict[str, str]:
    """Model name -> the Service whose EndpointSlices hold its pods, for every fronted model (the
    operator names its Service after the NIMService, as the raw path does after the model)."""
    return {m.name: nim.names(m, stack).service if m.on_operator else common.ModelNames.of(m).service
            for m in _fronted(stack)}


def endpoint_url(stack: StackConfig) -> str:
    """Where clients send OpenAI-style requests: the router Service's plain-HTTP port (TLS in the
    chart covers the pylon-facing QUIC/gRPC identity, not this port)."""
    router = stack.router
    return f"http://{in_cluster(router.name, stack.platform.namespace)}:{HTTP_PORT}"


def compile_router(stack: StackConfig) -> RouterManifests:
    router = stack.router
    if router is None:
        raise ValueError("the stack declares no router")
    topology = router.topology
    names = RouterNames.of(router)
    parts: dict = {}
    if router.service_account is None:
        role, binding = compile_role(stack, names.pod_reader_role, names.service_account,
                                     ROUTER_COMPONENT, POD_READER_RULE)
        parts.update(service_account=compile_service_account(stack, names.service_account, ROUTER_COMPONENT),
                     role=role, role_binding=binding)
    if router.replicas > 1:
        parts["pod_disruption_budget"] = compile_pdb(stack, names.router, ROUTER_COMPONENT, {"maxUnavailable": 1})
    if router.metrics.service_monitor:
        parts["service_monitor"] = compile_service_monitor(stack, names.metrics, ROUTER_COMPONENT, "metrics")
    if topology.backend_router:
        role, binding = compile_role(stack, names.backend_role, names.backend_service_account,
                                     BACKEND_COMPONENT, ENDPOINTSLICE_RULE)
        if router.backend_router.service_account is None:
            parts["backend_service_account"] = compile_service_account(
                stack, names.backend_service_account, BACKEND_COMPONENT)
        parts.update(
            backend_role=role,
            backend_role_binding=binding,
            backend_deployment=compile_backend_deployment(stack, names),
            backend_service=compile_backend_service(stack, names),
            # chart 0.16.2 values.yaml backendRouter.podDisruptionBudget: maxUnavailable 1.
            backend_pod_disruption_budget=compile_pdb(stack, names.backend, BACKEND_COMPONENT, {"maxUnavailable": 1}),
            backend_network_policy=compile_backend_policy(stack, names),
        )
        if router.metrics.service_monitor:
            parts["backend_service_monitor"] = compile_service_monitor(
                stack, names.backend_metrics, BACKEND_COMPONENT, "health")
    lb_config = compile_lb_config(stack)
    if lb_config is not None:
        parts["lb_config"] = lb_config
    if router.tls.issued:
        if router.tls.issuer is None:
            parts["issuer"] = compile_self_signed_issuer(stack, names)
        parts["certificate"] = compile_certificate(stack, names)
    return RouterManifests(
        topology=topology,
        names=names,
        workload=compile_router_workload(stack, names, topology),
        service=compile_router_service(stack, names),
        headless_service=compile_headless_service(stack, names),
        network_policy=compile_router_policy(stack, names, topology.backend_router),
        **parts,
    )


# --- what the cluster must already serve ----------------------------------------------------

CERT_MANAGER_FIX = ("install cert-manager with its CRDs (helm install cert-manager jetstack/cert-manager "
                    "-n cert-manager --create-namespace --set crds.enabled=true), set "
                    "router.tls.existingSecret, or set router.tls.enabled: false")
SERVICE_MONITOR_FIX = ("install the Prometheus Operator with its CRDs (e.g. the kube-prometheus-stack chart), "
                       "or set router.metrics.serviceMonitor: false")


def required_crds(manifests: RouterManifests) -> list[dict]:
    """The other operators' CRDs the router's objects need, per setting, with the fix: checked at
    preview (providers.crd_check) so a cluster without them stops the stack before anything is
    created, instead of an `up` failing half-way with "no matches for kind"."""
    requirements = []
    tls_objects = [m for m in (manifests.issuer, manifests.certificate) if m is not None]
    if tls_objects:
        kinds = [m["kind"] for m in tls_objects]
        issuer_ref = (manifests.certificate or {}).get("spec", {}).get("issuerRef", {})
        if issuer_ref.get("kind") and issuer_ref["kind"] not in kinds:
            kinds.append(issuer_ref["kind"])  # an existing Issuer / ClusterIssuer, by reference
        requirements.append({
            "field": "router.tls",
            "crds": [f"{kind.lower()}s.{CERT_MANAGER_GROUP}" for kind in dict.fromkeys(kinds)],
            "version": "v1",
            "fix": CERT_MANAGER_FIX,
        })
    if manifests.service_monitor is not None:
        requirements.append({
            "field": "router.metrics.serviceMonitor",
            "crds": ["servicemonitors.monitoring.coreos.com"],
            "version": "v1",
            "fix": SERVICE_MONITOR_FIX,
        })
    return requirements
