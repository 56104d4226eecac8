"""What a router config resolves to: its topology, derived names and certificate names (the
stack checks the names against the namespace and the models: ``stack.router_problems``).

The advertised hostname and the certificate names follow the llm-request-router chart
(devilkun/nvcf@e07119fa, chart 0.16.2, ``templates/_helpers.tpl``: ``advertisedHostnameTemplate``
and ``effectiveCertificateDnsNames``): a router that advertises per-pod names
(``{pod_name}.<headless>.<ns>.svc.cluster.local``) needs the one-label wildcard
``*.<headless>.<ns>.svc.cluster.local`` on its certificate, since pylons verify the pod's name as
the QUIC SNI. Those names are added whether or not ``dnsNames`` is set, so they are checked
against ``allowedDomains`` like the names the user wrote (issue 15 item 10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional

from contract.names import headless_service_name

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
