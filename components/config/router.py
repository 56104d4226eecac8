"""The `llm-serving:router` section: the request router in front of the models.

Topology is decided here, at validation time, so a stack that could not discover its peers is
refused before anything reaches a cluster:

    kind         replicas  discovery                      backend router
    Deployment   1         self only                      only when enabled: true
    Deployment   > 1       backend router (EndpointSlices) required (auto enables it)
    StatefulSet  any       per-pod DNS (headless Service) optional; required when DNS is off
                                                          and replicas > 1

Workload kind is the one setting Kubernetes cannot change in place: a switch deletes one object
and creates another. ``kind_change_problem`` is the rule the deploy-time guard applies against
the kind recorded in the stack's state, so neither an edit nor a changed default can flip an
existing install without ``workload.migrateFrom`` saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Iterable, Literal, Optional, Union

from pydantic import AfterValidator, Field, field_validator, model_validator

from . import values
from .model import Image, NonRootUid, PositiveQuantity, Strict
from .pylon import PylonConfig, WorkerAuth, pylon_problems

WorkloadKind = Literal["Deployment", "StatefulSet"]
DEFAULT_KIND: WorkloadKind = "Deployment"

# Longest derived Service name is "<name>-headless" (DNS-1035, 63); StatefulSet pods also carry
# a "<name>-<hash>" controller-revision label, so keep well under the limit.
ROUTER_NAME_MAX = 40
_DNS_NAME = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# Environment the compiler sets on the router; user `env` may not shadow it.
RESERVED_ENV = (
    "POD_NAME", "POD_NAMESPACE", "ROUTER_PORT", "ROUTER_DISCOVERY", "ROUTER_BACKEND_ROUTER",
    "ROUTER_PEER_DNS", "ROUTER_MODELS", "ROUTER_TLS_CERT_FILE", "ROUTER_TLS_KEY_FILE",
)


def check_router_name(name: str) -> str:
    if len(name) > ROUTER_NAME_MAX or not values.DNS1035_LABEL.match(name):
        raise ValueError(
            f"'{name}' is not a valid router name; use at most {ROUTER_NAME_MAX} lowercase letters, "
            "digits and '-', starting with a letter (it names the router's Services)"
        )
    return name


def check_dns_name(name: str) -> str:
    if len(name) > 253 or not _DNS_NAME.match(name):
        raise ValueError(
            f"'{name}' is not a DNS name; write lowercase labels joined by '.', optionally "
            "starting with '*.', e.g. 'router.example.com'"
        )
    return name


def check_domain(domain: str) -> str:
    if len(domain) > 253 or not _DOMAIN.match(domain):
        raise ValueError(
            f"'{domain}' is not a domain; write lowercase labels joined by '.' without a "
            "wildcard, e.g. 'example.com' (subdomains are allowed with it)"
        )
    return domain


RouterName = Annotated[str, AfterValidator(check_router_name)]
DnsName = Annotated[str, AfterValidator(check_dns_name)]
Domain = Annotated[str, AfterValidator(check_domain)]
Label = Annotated[str, AfterValidator(values.check_dns1123_label)]


class RouterResources(Strict):
    cpu: PositiveQuantity = Field("500m", description="CPU request of the router container.")
    memory: PositiveQuantity = Field(
        "512Mi", description="Memory request and limit of the router container (kept equal)."
    )


class BackendRouterResources(Strict):
    cpu: PositiveQuantity = Field("100m", description="CPU request of the backend-router container.")
    memory: PositiveQuantity = Field(
        "256Mi", description="Memory request and limit of the backend-router container (kept equal)."
    )


class Workload(Strict):
    kind: WorkloadKind = Field(
        DEFAULT_KIND,
        description="`Deployment` or `StatefulSet`. Kubernetes cannot change a workload's kind in "
        "place: an install deployed as StatefulSet must pin `StatefulSet` here; switching needs "
        "`migrateFrom`.",
    )
    migrate_from: Optional[WorkloadKind] = Field(
        None,
        description="Acknowledges a kind switch: the kind currently deployed, which `pulumi up` will "
        "delete after creating `kind`. Without it, a stack whose deployed kind differs from `kind` "
        "(by an edit or a changed default) fails at preview.",
    )
    pod_management_policy: Literal["OrderedReady", "Parallel"] = Field(
        "Parallel",
        description="StatefulSet only: how pods start and stop. Immutable on a live StatefulSet "
        "(a change replaces it); router pods are interchangeable, so `Parallel`.",
    )


class BackendRouter(Strict):
    enabled: Union[Literal["auto"], bool] = Field(
        "auto",
        description="`auto` enables it when the topology needs it (a Deployment with more than one "
        "replica, or a multi-replica StatefulSet without DNS discovery); `true` always; `false` "
        "never (an error where it is needed).",
    )
    image: Optional[Image] = Field(
        None, description="Backend-router image, fully qualified; required when it is enabled (no public default)."
    )
    replicas: int = Field(2, ge=1, description="Backend-router replicas.")
    pdb_min_available: int = Field(
        1, ge=0, description="PodDisruptionBudget minAvailable; below `replicas`, so node drains can proceed."
    )
    service_monitor: bool = Field(
        False, description="Create a ServiceMonitor (monitoring.coreos.com/v1; needs the Prometheus Operator CRDs)."
    )
    rbac_scope: Literal["namespace", "cluster"] = Field(
        "namespace",
        description="`namespace`: Role/RoleBinding to read EndpointSlices in the stack namespace; "
        "`cluster`: ClusterRole/ClusterRoleBinding (all namespaces). Verbs are get/list/watch either way.",
    )
    port: int = Field(50051, ge=1, le=65535, description="gRPC port the router connects to.")
    metrics_port: int = Field(9090, ge=1, le=65535, description="Prometheus metrics port.")
    resources: BackendRouterResources = Field(
        default_factory=BackendRouterResources, description="Backend-router CPU and memory."
    )

    @field_validator("enabled", mode="before")
    @classmethod
    def _auto_or_bool(cls, value: object) -> object:
        if value == "auto" or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ValueError(f"{value!r} is not one of auto, true, false")


class TlsIssuer(Strict):
    kind: Literal["Issuer", "ClusterIssuer"] = Field("ClusterIssuer", description="cert-manager issuer kind.")
    name: Label = Field(description="Name of the existing cert-manager Issuer or ClusterIssuer.")


class RouterTls(Strict):
    enabled: bool = Field(False, description="Serve TLS with a cert-manager Certificate.")
    issuer: Optional[TlsIssuer] = Field(
        None, description="Issuer of the certificate; unset: a self-signed Issuer is created for the router."
    )
    dns_names: tuple[DnsName, ...] = Field(
        (), description="Names on the certificate; unset: the router Service's in-cluster names."
    )
    allowed_domains: tuple[Domain, ...] = Field(
        (),
        description="Domains the certificate may name (each with its subdomains); a DNS name outside "
        "them is refused. Unset: the stack namespace's in-cluster domains (`<ns>.svc`, "
        "`<ns>.svc.cluster.local`).",
    )
    secret_name: Optional[Label] = Field(None, description="Secret the certificate is stored in; unset: `<name>-tls`.")


class RouterConfig(Strict):
    """The LLM request router in front of the models (unset: no router)."""

    name: RouterName = Field("llm-router", description="Name of the router's workload and Service.")
    image: Image = Field(
        description="Router image, fully qualified and pinned (there is no public default), e.g. "
        "`nvcr.io/nvidia/llm-request-router:<tag>`."
    )
    replicas: int = Field(1, ge=1, description="Router replicas; more than one needs peer discovery (see topology).")
    port: int = Field(8080, ge=1, le=65535, description="Port the router serves on (container and Service).")
    health_path: str = Field("/health", description="HTTP path of readiness and liveness probes.")
    uid: NonRootUid = Field(65532, description="uid of router and backend-router pods (the distroless `nonroot` user).")
    gid: int = Field(65532, ge=0, description="gid of router and backend-router pods.")
    resources: RouterResources = Field(default_factory=RouterResources, description="Router CPU and memory.")
    workload: Workload = Field(default_factory=Workload, description="Workload kind and its rollout settings.")
    backend_router: BackendRouter = Field(
        default_factory=BackendRouter, description="The backend router: discovers targets from EndpointSlices."
    )
    dns_discovery: Optional[bool] = Field(
        None,
        description="StatefulSet only: stable per-pod DNS through a headless Service. Unset: on for "
        "a StatefulSet, off for a Deployment (whose pods have no stable names).",
    )
    tls: RouterTls = Field(default_factory=RouterTls, description="TLS through cert-manager.")
    models: Optional[tuple[str, ...]] = Field(
        None, description="Names of the models the router fronts; unset: every model of the stack."
    )
    args: tuple[str, ...] = Field((), description="Extra router arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra router environment variables.")
    pylon: Optional[PylonConfig] = Field(None, description="The pylon sidecar that registers each fronted model with the router (see components/config/pylon.py).")
    worker_auth: Optional[WorkerAuth] = Field(None, description="How the router authenticates pylons; required with `pylon`.")

    @field_validator("health_path")
    @classmethod
    def _leading_slash(cls, path: str) -> str:
        path = path.strip()
        if not path or any(ch.isspace() for ch in path):
            raise ValueError("health path must be a non-empty URL path such as '/health'")
        return path if path.startswith("/") else "/" + path

    @model_validator(mode="after")
    def _topology(self) -> "RouterConfig":
        problems = topology_problems(self) + pylon_problems(self)
        if problems:
            raise values.Problems(problems)
        return self

    @property
    def topology(self) -> "Topology":
        return resolve_topology(self)


@dataclass(frozen=True)
class Topology:
    """What the router config resolves to; ``reason`` says why, in words for a preview reader."""

    kind: WorkloadKind
    replicas: int
    backend_router: bool
    headless_service: bool
    discovery: tuple[str, ...]  # preference order: "backend-router", "dns"; or ("self",)
    reason: str


def resolve_topology(router: RouterConfig) -> Topology:
    kind, replicas, enabled = router.workload.kind, router.replicas, router.backend_router.enabled
    if kind == "Deployment":
        headless = False
        backend = enabled is True or (enabled == "auto" and replicas > 1)
        if replicas > 1:
            reason = f"Deployment with {replicas} replicas: peers are discovered by the backend router"
        elif backend:
            reason = "single-replica Deployment; backend router enabled explicitly"
        else:
            reason = "single-replica Deployment: the router discovers only itself"
    else:
        headless = router.dns_discovery is not False
        backend = enabled is True or (enabled == "auto" and not headless and replicas > 1)
        if headless:
            reason = "StatefulSet: stable per-pod DNS through a headless Service"
        elif backend:
            reason = "StatefulSet without DNS discovery: peers are discovered by the backend router"
        else:
            reason = "StatefulSet without DNS discovery: the router discovers only itself"
    discovery = tuple(mode for mode, on in (("backend-router", backend), ("dns", headless)) if on) or ("self",)
    return Topology(kind, replicas, backend, headless, discovery, reason)


def topology_problems(router: RouterConfig) -> list[tuple[str, str]]:
    """Paths are relative to the router section."""
    problems: list[tuple[str, str]] = []
    kind, replicas = router.workload.kind, router.replicas
    backend = router.backend_router
    if router.workload.migrate_from == kind:
        problems.append((
            "workload.migrateFrom",
            f"names the kind the config already asks for ({kind}); it acknowledges a switch away "
            "from the deployed kind, so remove it or set it to the kind being replaced",
        ))
    if kind == "Deployment":
        if router.dns_discovery is True:
            problems.append((
                "dnsDiscovery",
                "per-pod DNS needs the stable pod names only a StatefulSet has; remove dnsDiscovery, "
                "or set workload.kind: StatefulSet",
            ))
        if "pod_management_policy" in router.workload.model_fields_set:
            problems.append((
                "workload.podManagementPolicy",
                "applies to a StatefulSet only; remove it, or set workload.kind: StatefulSet",
            ))
        if replicas > 1 and backend.enabled is False:
            problems.append((
                "backendRouter.enabled",
                f"a Deployment with {replicas} replicas needs the backend router to discover its "
                "peers (Deployment pods have no stable DNS names); set backendRouter.enabled: auto "
                "(or true), or replicas: 1, or workload.kind: StatefulSet",
            ))
    elif router.dns_discovery is False and replicas > 1 and backend.enabled is False:
        problems.append((
            "backendRouter.enabled",
            f"a StatefulSet with {replicas} replicas and dnsDiscovery: false has no way to discover "
            "its peers; set backendRouter.enabled: auto (or true), or remove dnsDiscovery: false",
        ))
    for key in sorted(router.env):
        if key in RESERVED_ENV:
            problems.append((f"env.{key}", "is set by the router component from config; remove it"))
    if problems:  # the rest depends on a coherent topology
        return problems
    topology = resolve_topology(router)
    if topology.backend_router:
        if backend.image is None:
            problems.append((
                "backendRouter.image",
                f"required: the backend router is enabled ({topology.reason}); set its fully "
                "qualified image, e.g. 'nvcr.io/nvidia/llm-backend-router:<tag>'",
            ))
        if backend.pdb_min_available >= backend.replicas:
            problems.append((
                "backendRouter.pdbMinAvailable",
                f"{backend.pdb_min_available} of {backend.replicas} replicas must stay available, so "
                "no backend-router pod could ever be evicted and node drains would hang; set it "
                f"below replicas (e.g. {backend.replicas - 1}) or raise backendRouter.replicas",
            ))
        if backend.port == backend.metrics_port:
            problems.append(("backendRouter.metricsPort", "must differ from backendRouter.port"))
    return problems


def fronted_models(router: RouterConfig, model_names: Iterable[str]) -> tuple[str, ...]:
    """The models behind the router, in stack order (every model unless ``models`` narrows it)."""
    names = tuple(model_names)
    if router.models is None:
        return names
    wanted = set(router.models)
    return tuple(name for name in names if name in wanted)


def default_dns_names(router: RouterConfig, namespace: str) -> tuple[str, ...]:
    return (f"{router.name}.{namespace}.svc", f"{router.name}.{namespace}.svc.cluster.local")


def allowed_domains(router: RouterConfig, namespace: str) -> tuple[str, ...]:
    return router.tls.allowed_domains or (f"{namespace}.svc", f"{namespace}.svc.cluster.local")


def dns_names(router: RouterConfig, namespace: str) -> tuple[str, ...]:
    return router.tls.dns_names or default_dns_names(router, namespace)


def within(name: str, domain: str) -> bool:
    """``name`` is ``domain`` or a subdomain of it (a wildcard covers the labels below its base)."""
    base = name[2:] if name.startswith("*.") else name
    return base == domain or base.endswith("." + domain)


def stack_problems(router: RouterConfig, namespace: str, model_names: Iterable[str]) -> list[tuple[str, str]]:
    """Checks that need the rest of the stack; paths are relative to the stack."""
    names = list(model_names)
    problems: list[tuple[str, str]] = []
    if router.models is not None:
        seen: set[str] = set()
        for index, name in enumerate(router.models):
            if name not in names:
                problems.append((
                    f"router.models.{index}",
                    f"'{name}' is not a model of this stack; declare it under models, or remove it "
                    f"(models: {', '.join(names) or 'none'})",
                ))
            elif name in seen:
                problems.append((f"router.models.{index}", f"'{name}' is listed twice; remove one"))
            seen.add(name)
    if not fronted_models(router, names) and not problems:
        problems.append((
            "router.models" if router.models is not None else "router",
            "the router fronts no models; declare models, or remove the router section",
        ))
    derived = {router.name, f"{router.name}-headless", f"{router.name}-backend"}
    for index, name in enumerate(names):
        if name in derived:
            problems.append((
                "router.name",
                f"'{router.name}' collides with model '{name}' (models.{index}): their Services "
                "would share a name; rename the router",
            ))
    if router.tls.enabled:
        allowed = allowed_domains(router, namespace)
        for index, name in enumerate(router.tls.dns_names):
            if not any(within(name, domain) for domain in allowed):
                problems.append((
                    f"router.tls.dnsNames.{index}",
                    f"'{name}' is outside the allowed domains ({', '.join(allowed)}); add its domain "
                    "to router.tls.allowedDomains, or remove the name",
                ))
    return problems


def kind_change_problem(deployed: Optional[str], kind: str, migrate_from: Optional[str],
                        kind_explicit: bool = True) -> Optional[str]:
    """Why applying ``kind`` over a router deployed as ``deployed`` must stop, or None.

    A kind switch is allowed only when ``workload.migrateFrom`` names the deployed kind: it is a
    delete and a create, never an in-place update, and must be a decision someone wrote down.
    """
    if not deployed or deployed == kind or migrate_from == deployed:
        return None
    source = "" if kind_explicit else " by default (workload.kind is unset)"
    return (
        f"router.workload.kind: the router is deployed as a {deployed} and the config now asks for "
        f"a {kind}{source}. Kubernetes cannot change a workload's kind in place: this would delete "
        f"the {deployed} and create a {kind}. To keep the install, pin workload.kind: {deployed}. "
        f"To switch, set workload.kind: {kind} and workload.migrateFrom: {deployed}, and review "
        "the create/delete in the preview."
    )
