"""The `llm-serving:router` section: the request router in front of the models.

Topology is decided here, at validation time, so a stack that could not discover its peers is
refused before anything reaches a cluster. The rules are the llm-request-router chart's (0.16.2,
``_helpers.tpl`` backendRouterEnabled, ``deployment.yaml``):

    kind         replicas  discovery                                backend router
    Deployment   1         self only (--disable-dns-discovery)      only when enabled: true
    Deployment   > 1       backend router (headless EndpointSlices) required (auto enables it)
    StatefulSet  any       headless Service DNS                     optional; required when DNS is
                                                                    off and replicas > 1

Workload kind is the one setting Kubernetes cannot change in place: a switch deletes one object
and creates another. ``contract.workload_kind`` holds the rule the deploy-time guard applies
against the kind recorded in the stack's state, so neither an edit nor a changed default can flip
an existing install without ``workload.migrateFrom`` saying so.

Checks that need the rest of the stack (the models it fronts, names that would collide with a
model's, certificate names against the namespace) are the stack's (``stack.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, Field, field_validator, model_validator

from . import kube, values
from .effect import unused_keys
from .gateway import GatewayConfig
from .pylon import PylonConfig, WorkerAuth, pylon_problems
from .router_lb import LoadBalancer
from .router_names import Topology, resolve_topology
from .router_release import DEFAULT_RELEASE, RELEASES, RouterRelease, unknown_flags
from .types import DnsName, Domain, Image, NonRootUid, PositiveQuantity, Strict, TlsIssuer, TlsSection, Toleration
from .values import Problem

WorkloadKind = Literal["Deployment", "StatefulSet"]
DEFAULT_KIND: WorkloadKind = "Deployment"

# Downward-API environment the compiler sets on the router (the chart's only env: POD_NAME,
# POD_NAMESPACE, POD_IP; devilkun/nvcf@e07119fa chart 0.16.2 templates/deployment.yaml).
RESERVED_ENV = ("POD_NAME", "POD_NAMESPACE", "POD_IP")

# Flags the compiler renders (chart 0.16.2 templates/deployment.yaml); `args` may not repeat them:
# a repeated flag is either refused by Stargate's CLI at startup or silently wins over ours, and
# then the Services, probes and backend router disagree with the pods.
MANAGED_FLAGS = (
    "--stargate-id", "--listen-addr", "--http-listen-addr", "--advertise-addr",
    "--stargate-discovery-dns-name", "--pod-name", "--pod-namespace",
    "--advertised-hostname-template", "--disable-dns-discovery", "--watch-heartbeat-ms",
    "--shutdown-drain-timeout-ms", "--readiness-warmup-ms",
    "--readiness-stabilization-sample-interval-ms", "--readiness-stabilization-window",
    "--quic-connect-timeout-ms", "--quic-request-timeout-ms", "--metrics-port",
    "--backend-connectivity", "--reverse-tunnel-listen-addr", "--grpc-pylon-dial-addr",
    "--reverse-tunnel-pylon-dial-addr", "--reverse-tunnel-connect-timeout-ms", "--tls-cert-path",
    "--tls-key-path", "--quic-insecure", "--config-file",
    # workerAuth.mode token (components.compile.pylon.router_worker_auth; env STARGATE_* is refused).
    "--worker-auth-file",
)

# Keys earlier versions of this section accepted, with what replaced them: a stack written for
# the invented router contract gets the fix instead of a bare "extra input".
RETIRED = {
    "port": "the router serves HTTP on 8000, gRPC on 50071, QUIC on 50072/UDP and metrics on 9090, "
            "as the llm-request-router chart does; remove `port`",
    "healthPath": "the probes use the router's own /readyz and /healthz; remove `healthPath`",
}
RETIRED_BACKEND = {
    "port": "the backend router serves gRPC on 50071, QUIC on 50072/UDP and health on 8080; remove it",
    "metricsPort": "the backend router serves metrics on its health port 8080; remove it",
    "pdbMinAvailable": "the backend router's PodDisruptionBudget is maxUnavailable: 1; remove it",
    "rbacScope": "the backend router reads EndpointSlices of its own namespace only (a Role); remove it",
    "serviceMonitor": "moved to router.metrics.serviceMonitor (covers router and backend router)",
}


RouterName = Annotated[str, AfterValidator(values.check_router_name)]
Label = Annotated[str, AfterValidator(values.check_dns1123_label)]


class ResourceAmounts(Strict):
    cpu: PositiveQuantity = Field(description="CPU.")
    memory: PositiveQuantity = Field(description="Memory.")


class ContainerResources(Strict):
    requests: ResourceAmounts = Field(description="What the scheduler reserves.")
    limits: ResourceAmounts = Field(description="The ceiling (CPU throttled, memory OOM-killed).")

    @model_validator(mode="after")
    def _requests_within_limits(self) -> ContainerResources:
        values.check_requests_within_limits(self.requests, self.limits)
        return self


def _resources(req_cpu: str, req_mem: str, lim_cpu: str, lim_mem: str) -> ContainerResources:
    return ContainerResources(requests=ResourceAmounts(cpu=req_cpu, memory=req_mem),
                              limits=ResourceAmounts(cpu=lim_cpu, memory=lim_mem))


# The chart's sizes (devilkun/nvcf@e07119fa chart 0.16.2 values.yaml): llmRequestRouter.resources
# and backendRouter.resources. The backend router relays every tunnel byte, so it is the larger.
ROUTER_RESOURCES = ("100m", "128Mi", "1000m", "1Gi")
BACKEND_RESOURCES = ("250m", "256Mi", "2", "1Gi")


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
        "never (an error where it is needed). It runs the router's image as `stargate-k8s-router`, "
        "watching the router's headless Service's EndpointSlices.",
    )
    image: Optional[Image] = Field(
        None,
        description="Unset (the chart's default): the router's image, which contains "
        "`stargate-k8s-router`. Set only to run another Stargate build of the same release line.",
    )
    replicas: int = Field(2, ge=1, description="Backend-router replicas (the chart's default: 2).")
    resources: ContainerResources = Field(
        default_factory=lambda: _resources(*BACKEND_RESOURCES),
        description="Backend-router requests and limits (default: the chart's 250m/256Mi, 2/1Gi).",
    )
    service_account: Optional[Label] = Field(
        None,
        description="An existing ServiceAccount for the backend router. Unset: one named "
        "`<name>-backend-router` is created. Either way a Role and RoleBinding grant it get/list/"
        "watch on EndpointSlices in the stack namespace.",
    )

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: object) -> object:
        if isinstance(data, dict):
            problems = [Problem(key, fix) for key, fix in RETIRED_BACKEND.items() if key in data]
            if problems:
                raise values.Problems(problems)
        return data

    @field_validator("enabled", mode="before")
    @classmethod
    def _auto_or_bool(cls, value: object) -> object:
        if value == "auto" or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ValueError(f"{value!r} is not one of auto, true, false")


class RouterTls(TlsSection):
    """The QUIC/gRPC server identity pylons verify (the HTTP port stays plain, as in the chart)."""

    enabled: bool = Field(
        False,
        description="Mount a TLS identity (router and backend router get `--tls-cert-path`/"
        "`--tls-key-path`, and no `--quic-insecure`). Off: Stargate self-signs and runs with "
        "`--quic-insecure`, the chart's default.",
    )
    existing_secret: Optional[Label] = Field(
        None,
        description="Mount this existing `kubernetes.io/tls` Secret (keys `tls.crt`, `tls.key`) "
        "instead of issuing a cert-manager Certificate; you own its issuance and renewal. With "
        "`router.pylon`, it must also hold `ca.crt` (the CA pylons verify the router with).",
    )
    issuer: Optional[TlsIssuer] = Field(
        None, description="Issuer of the certificate; unset: a self-signed Issuer is created for the router."
    )
    dns_names: tuple[DnsName, ...] = Field(
        (),
        description="Names on the certificate; unset: the router Service's in-cluster names. The "
        "name pylons verify is always added: `*.<name>-headless.<ns>.svc.cluster.local` when "
        "router pods advertise per-pod names (backend router or several replicas), else "
        "`<name>.<ns>.svc.cluster.local`.",
    )
    allowed_domains: tuple[Domain, ...] = Field(
        (),
        description="Domains the certificate may name (each with its subdomains); a DNS name outside "
        "them, including the names added by default, is refused. Unset: the stack namespace's "
        "in-cluster domains (`<ns>.svc`, `<ns>.svc.cluster.local`).",
    )
    secret_name: Optional[Label] = Field(None, description="Secret the certificate is stored in; unset: `<name>-tls`.")


class RouterMetrics(Strict):
    service_monitor: bool = Field(
        False,
        description="A ServiceMonitor for the router (port `metrics`, 9090) and, when it runs, one "
        "for the backend router (port `health`, 8080); needs the Prometheus Operator CRDs.",
    )


class RouterConfig(Strict):
    """The LLM request router (NVIDIA llm-request-router, "Stargate") in front of the models."""

    name: RouterName = Field("llm-router", description="Name of the router's workload and Services.")
    image: Image = Field(
        description="Stargate image, fully qualified and pinned (the chart ships no registry "
        "default); the backend router runs it too. Its build must be of `release`'s line."
    )
    release: RouterRelease = Field(
        DEFAULT_RELEASE,
        description="The Stargate release line `image` is a build of, which decides the flags "
        "rendered: `chart-0.16` (llm-request-router chart 0.16.2, Stargate 0.16.2; the default, "
        "what every stack rendered before this setting) or `public-0.4` (the public Stargate "
        "0.4.0 build, NVIDIA/nvcf@fadc0f8: no readiness-gate flags on the router, no "
        "--advertised-grpc-port/--grpc-pylon-dial-addr/--watch-heartbeat-ms/"
        "--shutdown-drain-timeout-ms on the backend router, no workerAuth.mode: token; `args` "
        "and `pylon.args` are checked against its CLI). Not inferred from the image tag: the two "
        "lines' version numbers overlap (the public workspace is 0.4.0, the chart's images 0.16.2).",
    )
    replicas: int = Field(1, ge=1, description="Router replicas; more than one needs peer discovery (see topology).")
    uid: NonRootUid = Field(1000, description="uid of router and backend-router pods (the chart's runAsUser).")
    gid: int = Field(1000, ge=0, description="gid and fsGroup of router and backend-router pods (the chart's fsGroup).")
    resources: ContainerResources = Field(
        default_factory=lambda: _resources(*ROUTER_RESOURCES),
        description="Router requests and limits (default: the chart's 100m/128Mi, 1000m/1Gi).",
    )
    # One placement for both Stargate workloads: the backend router relays the router pods'
    # tunnels, so wherever the router must run (a node pool, a real node beside simulated ones)
    # its backend router must too.
    node_selector: kube.Labels = Field(
        default_factory=dict, description="Node labels the router's pods and the backend router's "
        "must carry, as a model's `nodeSelector`; unset: any node the scheduler picks.")
    tolerations: tuple[Toleration, ...] = Field(
        (), description="Taints the router's pods and the backend router's tolerate, as a model's "
        "`tolerations`; unset: none.")
    service_account: Optional[Label] = Field(
        None,
        description="An existing ServiceAccount for the router pods. Unset: `<name>` is created "
        "with the chart's Role (pods: list, watch).",
    )
    workload: Workload = Field(default_factory=Workload, description="Workload kind and its rollout settings.")
    backend_router: BackendRouter = Field(
        default_factory=BackendRouter,
        description="The backend router: hands pylons the router pods it reads from the router's "
        "headless Service and forwards their registrations and tunnels to the named pod.",
    )
    dns_discovery: Optional[bool] = Field(
        None,
        description="StatefulSet only: peers find each other through the headless Service's DNS. "
        "Unset: on for a StatefulSet; a Deployment without backend router runs "
        "`--disable-dns-discovery` (its pods have no stable names).",
    )
    drain_timeout_ms: int = Field(
        30000, ge=1000, le=600000,
        description="`--shutdown-drain-timeout-ms` of router and backend router; the pods' grace "
        "period is this rounded up to seconds plus 5.",
    )
    metrics: RouterMetrics = Field(default_factory=RouterMetrics, description="Prometheus scraping.")
    load_balancer: Optional[LoadBalancer] = Field(
        None,
        description="The load-balancing algorithm per model (rendered as the `--lb-config-path` "
        "file, a ConfigMap; see components/config/router_lb.py). `pulsar` with "
        "`requireCacheAffinityKey` is prefix-cache-aware routing on `x-cache-affinity-key`. "
        "Unset: no file, every model `power-of-n`.",
    )
    tls: RouterTls = Field(default_factory=RouterTls, description="The router's QUIC/gRPC TLS identity.")
    models: Optional[tuple[str, ...]] = Field(
        None, description="Names of the models the router fronts; unset: every model of the stack."
    )
    args: tuple[str, ...] = Field((), description="Extra Stargate flags (not those the component sets).")
    env: kube.EnvVars = Field(default_factory=dict, description="Extra router environment variables.")
    pylon: Optional[PylonConfig] = Field(
        None, description="The pylon sidecar that registers each fronted model with the router "
        "(see components/config/pylon.py).")
    worker_auth: Optional[WorkerAuth] = Field(None, description="How the router authenticates pylons; required with `pylon`.")
    gateway: GatewayConfig = Field(
        default_factory=GatewayConfig,
        description="The OpenAI front door clients call (see components/config/gateway.py): it sets "
        "the headers the router requires, answers non-streaming requests from the stream, API keys.")

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: object) -> object:
        if isinstance(data, dict):
            problems = [Problem(key, fix) for key, fix in RETIRED.items() if key in data]
            if problems:
                raise values.Problems(problems)
        return data

    @model_validator(mode="after")
    def _topology(self) -> RouterConfig:
        problems = topology_problems(self) + release_problems(self) + pylon_problems(self)
        if problems:
            raise values.Problems(problems)
        return self

    @property
    def topology(self) -> Topology:
        return resolve_topology(self)


def topology_problems(router: RouterConfig) -> list[Problem]:
    """Paths are relative to the router section."""
    problems: list[Problem] = []
    kind, replicas = router.workload.kind, router.replicas
    backend = router.backend_router
    if router.workload.migrate_from == kind:
        problems.append(Problem(
            "workload.migrateFrom",
            f"names the kind the config already asks for ({kind}); it acknowledges a switch away "
            "from the deployed kind, so remove it or set it to the kind being replaced",
        ))
    if kind == "Deployment":
        if router.dns_discovery is not None:
            problems.append(Problem(
                "dnsDiscovery",
                "applies to a StatefulSet only (a Deployment discovers through the backend router, "
                "or only itself); remove dnsDiscovery, or set workload.kind: StatefulSet",
            ))
        if "pod_management_policy" in router.workload.model_fields_set:
            problems.append(Problem(
                "workload.podManagementPolicy",
                "applies to a StatefulSet only; remove it, or set workload.kind: StatefulSet",
            ))
        if replicas > 1 and backend.enabled is False:
            problems.append(Problem(
                "backendRouter.enabled",
                f"a Deployment with {replicas} replicas needs the backend router: pylons must reach "
                "every router pod and Deployment pods have no stable DNS names; set "
                "backendRouter.enabled: auto (or true), or replicas: 1, or workload.kind: StatefulSet",
            ))
    elif router.dns_discovery is False and replicas > 1 and backend.enabled is False:
        problems.append(Problem(
            "backendRouter.enabled",
            f"a StatefulSet with {replicas} replicas and dnsDiscovery: false has no way to discover "
            "its peers; set backendRouter.enabled: auto (or true), or remove dnsDiscovery: false",
        ))
    if backend.enabled == "auto" and not resolve_topology(router).backend_router:
        # `auto` resolving to "no backend router" is invisible in the file (unlike enabled: false,
        # a switch the user turned off and may turn on again with these settings kept).
        problems += unused_keys(backend, ("image", "replicas", "resources", "service_account"), "backendRouter.",
                                "configures the backend router, which this topology does not run "
                                f"({resolve_topology(router).reason}); remove it, or set backendRouter.enabled: true")
    for key in sorted(router.env):
        if key in RESERVED_ENV or key.startswith("STARGATE_"):
            problems.append(Problem(f"env.{key}", "is set by the router component (or is a Stargate flag "
                                    "alias that would override a managed flag); remove it"))
    for index, arg in enumerate(router.args):
        flag = arg.split("=", 1)[0]
        if flag == "--lb-config-path" and router.load_balancer is not None:
            problems.append(Problem(f"args.{index}", "'--lb-config-path' is rendered from loadBalancer; "
                                    "remove it, or remove loadBalancer to mount your own file"))
        # A managed flag the release line lacks is reported as such (release_problems).
        if flag in MANAGED_FLAGS and flag not in RELEASES[router.release].router_lacks:
            problems.append(Problem(f"args.{index}", f"'{flag}' is set by the router component from config; "
                                    "remove it (see the router section of the config reference)"))
    return problems


def release_problems(router: RouterConfig) -> list[Problem]:
    """What the chosen release line lacks (paths relative to the router section)."""
    line = RELEASES[router.release]
    problems: list[Problem] = []
    for index, flag in unknown_flags(router.args, line.router_flags):
        problems.append(Problem(f"args.{index}", f"'{flag}' is not a flag of the {line.name} router "
                                f"({line.describes}), which would refuse to start; remove it, or set "
                                "router.release to the line that has it"))
    if router.pylon is not None:
        for index, flag in unknown_flags(router.pylon.args, line.pylon_flags):
            problems.append(Problem(f"pylon.args.{index}", f"'{flag}' is not a flag of the {line.name} "
                                    f"pylon ({line.describes}); remove it, or set router.release to the "
                                    "line that has it"))
    auth = router.worker_auth
    if auth is not None and auth.mode == "token" and line.worker_auth_file is False:
        problems.append(Problem("workerAuth.mode", f"mode: token renders --worker-auth-file, which the "
                                f"{line.name} router ({line.describes}) does not have (its only "
                                "authenticator is NVCF's --worker-auth-endpoint); set workerAuth.mode: "
                                "open and keep its gRPC/QUIC ports to model pods with "
                                "platform.networkPolicy, or run a router image with --worker-auth-file"))
    return problems
