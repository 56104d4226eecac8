"""What a router config resolves to: its derived names and certificate names (the stack checks the
names against the namespace and the models: ``stack.router_problems``; its topology is
``router.resolve_topology``). Above the router section in the config's layers: it reads it.

The advertised hostname and the certificate names follow the llm-request-router chart
(devilkun/nvcf@e07119fa, chart 0.16.2, ``templates/_helpers.tpl``: ``advertisedHostnameTemplate``
and ``effectiveCertificateDnsNames``): a router that advertises per-pod names
(``{pod_name}.<headless>.<ns>.svc.cluster.local``) needs the one-label wildcard
``*.<headless>.<ns>.svc.cluster.local`` on its certificate, since pylons verify the pod's name as
the QUIC SNI. Those names are added whether or not ``dnsNames`` is set, so they are checked
against ``allowedDomains`` like the names the user wrote (issue 15 item 10).
"""

from __future__ import annotations

from typing import Optional

from contract.names import headless_service_name

from .router import RouterConfig


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
