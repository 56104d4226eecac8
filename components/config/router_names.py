"""What a router config resolves to: its topology, derived names and certificate names, and the
checks that need the namespace and the other models.

The advertised hostname and the certificate names follow the llm-request-router chart
(devilkun/nvcf@e07119fa, chart 0.16.2, ``templates/_helpers.tpl``: ``advertisedHostnameTemplate``
and ``effectiveCertificateDnsNames``): a router that advertises per-pod names
(``{pod_name}.<headless>.<ns>.svc.cluster.local``) needs the one-label wildcard
``*.<headless>.<ns>.svc.cluster.local`` on its certificate, since pylons verify the pod's name as
the QUIC SNI. Those names are added whether or not ``dnsNames`` is set, so they are checked
against ``allowedDomains`` like the names the user wrote (issue 15 item 10).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional

from .gateway import gateway_problems

if TYPE_CHECKING:
    from .router import RouterConfig


@dataclass(frozen=True)
class Topology:
    """What the router config resolves to; ``reason`` says why, in words for a preview reader."""

    kind: Literal["Deployment", "StatefulSet"]
    replicas: int
    backend_router: bool
    dns_discovery: bool  # False renders --disable-dns-discovery
    name: str  # "single-deployment", "deployment+backend", "statefulset-dns", "statefulset" (+backend)
    reason: str

    @property
    def per_pod_hostnames(self) -> bool:
        """Pods advertise `<pod>.<headless>...` (chart _helpers.tpl advertisedHostnameTemplate)."""
        return self.backend_router or self.replicas > 1

    @property
    def discovery(self) -> tuple[str, ...]:
        return tuple(m for m, on in (("backend-router", self.backend_router), ("dns", self.dns_discovery)) if on) or ("self",)


def resolve_topology(router: RouterConfig) -> Topology:
    """The chart's rules (devilkun/nvcf@e07119fa chart 0.16.2 _helpers.tpl backendRouterEnabled,
    deployment.yaml $disableDnsDiscovery), plus `auto` for a StatefulSet without DNS."""
    kind, replicas, enabled = router.workload.kind, router.replicas, router.backend_router.enabled
    if kind == "Deployment":
        backend = enabled is True or (enabled == "auto" and replicas > 1)
        dns = backend  # a Deployment without backend router is forced to --disable-dns-discovery
        name = "deployment+backend" if backend else "single-deployment"
        if replicas > 1:
            reason = f"Deployment with {replicas} replicas: pylons reach each pod through the backend router"
        elif backend:
            reason = "single-replica Deployment; backend router enabled explicitly"
        else:
            reason = "single-replica Deployment: the router discovers only itself"
    else:
        dns = router.dns_discovery is not False
        backend = enabled is True or (enabled == "auto" and not dns and replicas > 1)
        name = ("statefulset-dns" if dns else "statefulset") + ("+backend" if backend else "")
        if dns:
            reason = "StatefulSet: peers discovered through the headless Service's DNS"
        elif backend:
            reason = "StatefulSet without DNS discovery: pylons reach each pod through the backend router"
        else:
            reason = "StatefulSet without DNS discovery: the router discovers only itself"
    return Topology(kind, replicas, backend, dns, name, reason)


def headless_service_name(router_name: str) -> str:
    """The headless Service of the router named ``router_name`` (``<name>-headless``, chart 0.16.2
    ``headless-service.yaml``): its EndpointSlices name the router pods, for the backend router
    and for ``components.targets``."""
    return f"{router_name}-headless"


def headless_name(router: RouterConfig) -> str:
    return headless_service_name(router.name)


def backend_name(router: RouterConfig) -> str:
    return f"{router.name}-backend-router"


def tls_secret_name(router: RouterConfig) -> Optional[str]:
    """The Secret holding the router's TLS identity, None without TLS: ``existingSecret``, else the
    cert-manager Certificate's ``secretName``, else ``<name>-tls``. The router mounts its
    ``tls.crt``/``tls.key``; pylons mount its ``ca.crt`` to verify the router (one function, so
    the two sides cannot name different Secrets)."""
    tls = router.tls
    if not tls.enabled:
        return None
    return tls.existing_secret or tls.secret_name or f"{router.name}-tls"


def advertised_hostname(router: RouterConfig, namespace: str) -> str:
    """The ``--advertised-hostname-template`` value; ``{pod_name}`` is Stargate's placeholder."""
    if router.topology.per_pod_hostnames:
        return f"{{pod_name}}.{headless_name(router)}.{namespace}.svc.cluster.local"
    return f"{router.name}.{namespace}.svc.cluster.local"


def default_dns_names(router: RouterConfig, namespace: str) -> tuple[str, ...]:
    return (f"{router.name}.{namespace}.svc", f"{router.name}.{namespace}.svc.cluster.local")


def allowed_domains(router: RouterConfig, namespace: str) -> tuple[str, ...]:
    return router.tls.allowed_domains or (f"{namespace}.svc", f"{namespace}.svc.cluster.local")


def covers(san: str, host: str) -> bool:
    """rustls-webpki matching, as the chart validates it: exact, or a leftmost ``*`` label that
    stands for exactly one label of ``host``."""
    if san == host:
        return True
    if not san.startswith("*."):
        return False
    head, _, rest = host.partition(".")
    return bool(head) and rest == san[2:]


def verified_name(router: RouterConfig, namespace: str) -> str:
    """The name pylons check the router's certificate against: the advertised hostname, with the
    pod's label as a wildcard when it is per pod."""
    return advertised_hostname(router, namespace).replace("{pod_name}", "*")


def added_dns_names(router: RouterConfig, namespace: str) -> tuple[str, ...]:
    """Names the router gets on its certificate without the user writing them."""
    written = router.tls.dns_names
    base = written or default_dns_names(router, namespace)
    needed = verified_name(router, namespace)
    if needed.startswith("*."):
        missing = needed not in base  # the chart appends the wildcard unless it is listed as is
    else:
        missing = not any(covers(san, needed) for san in base)
    return (() if written else base) + ((needed,) if missing else ())


def dns_names(router: RouterConfig, namespace: str) -> tuple[str, ...]:
    """Every name on the Certificate: the written ones (or the Service's), plus the verified one."""
    return tuple(router.tls.dns_names) + added_dns_names(router, namespace)


def within(name: str, domain: str) -> bool:
    """``name`` is ``domain`` or a subdomain of it (a wildcard covers the labels below its base)."""
    base = name[2:] if name.startswith("*.") else name
    return base == domain or base.endswith("." + domain)


def stack_problems(router: RouterConfig, namespace: str, model_names: Iterable[str]) -> list[tuple[str, str]]:
    """Checks that need the rest of the stack; paths are relative to the stack."""
    from .router import fronted_models

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
    from .router_lb import lb_model_problems

    problems += [(f"router.{path}", fix) for path, fix in
                 lb_model_problems(router.load_balancer, fronted_models(router, names))]
    if router.gateway.enabled:
        problems.extend((f"router.gateway.{path}", fix) for path, fix in
                        gateway_problems(router.gateway, fronted_models(router, names)))
        requiring = sorted(name for name, choice in (router.load_balancer.models if router.load_balancer else {}).items()
                           if not isinstance(choice, str) and choice.require_cache_affinity_key)
        if requiring and not router.gateway.affinity.enabled:
            problems.append(("router.gateway.affinity.enabled", "the load balancer requires "
                             f"x-cache-affinity-key for {', '.join(requiring)} (requireCacheAffinityKey), "
                             "which the gateway then never sends: every request would get 400; enable "
                             "affinity, or drop requireCacheAffinityKey"))
        if router.gateway.resolved_name(router.name) in (router.name, headless_name(router), backend_name(router)):
            problems.append(("router.gateway.name", f"'{router.gateway.resolved_name(router.name)}' is "
                             "already a name of the router's objects; choose another, or remove it"))
    derived = {router.name, headless_name(router), backend_name(router),
               *((router.gateway.resolved_name(router.name),) if router.gateway.enabled else ())}
    for index, name in enumerate(names):
        if name in derived:
            problems.append((
                "router.name",
                f"'{router.name}' collides with model '{name}' (models.{index}): their Services "
                "would share a name; rename the router",
            ))
    if router.tls.issued:
        allowed = allowed_domains(router, namespace)
        where = ", ".join(allowed)
        for index, name in enumerate(router.tls.dns_names):
            if not any(within(name, domain) for domain in allowed):
                problems.append((
                    f"router.tls.dnsNames.{index}",
                    f"'{name}' is outside the allowed domains ({where}); add its domain "
                    "to router.tls.allowedDomains, or remove the name",
                ))
        for name in added_dns_names(router, namespace):
            if not any(within(name, domain) for domain in allowed):
                problems.append((
                    "router.tls.allowedDomains",
                    f"the router's certificate gets '{name}' by default (the name pylons verify, or "
                    f"the Service's in-cluster name) and it is outside the allowed domains ({where}); "
                    f"add '{namespace}.svc.cluster.local' to router.tls.allowedDomains",
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
