"""Object names both sides derive: the compilers when they render, the providers when they read."""

from __future__ import annotations


def headless_service_name(router_name: str) -> str:
    """The headless Service of the router named ``router_name`` (``<name>-headless``, chart 0.16.2
    ``headless-service.yaml``): its EndpointSlices name the router pods, for the backend router
    and for ``contract.targets``."""
    return f"{router_name}-headless"
