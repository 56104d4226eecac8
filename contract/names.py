"""Object names both sides derive: the compilers when they render, the providers when they read."""

from __future__ import annotations

# The pylon sidecar's container name: the compiler names it, and a model pod counts as a router
# target only while the container of this name is ready (``contract.targets``).
PYLON_CONTAINER = "pylon"


def headless_service_name(router_name: str) -> str:
    """The headless Service of the router named ``router_name`` (``<name>-headless``, chart 0.16.2
    ``headless-service.yaml``): its EndpointSlices name the router pods, for the backend router
    and for ``contract.targets``."""
    return f"{router_name}-headless"
