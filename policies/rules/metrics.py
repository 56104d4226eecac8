"""Prometheus scraping: a ServiceMonitor that selects no Service, or names a port its Services do
not have, scrapes nothing, and nothing says so (the Prometheus Operator just finds no target).

The check: every ServiceMonitor of the stack selects (``spec.selector.matchLabels``, within
``spec.namespaceSelector.matchNames`` or its own namespace) at least one Service the stack
declares, and each endpoint's ``port`` is a named port of at least one of them. Monitors with
``matchExpressions`` or ``namespaceSelector.any`` select beyond what the stack can see and are left
alone; unknown values during preview are reported as unchecked.
"""

from __future__ import annotations

from collections.abc import Iterator

from .base import stack_rule
from .kube import UNKNOWN, Finding, Stack, as_list, get, unchecked, violation

MONITOR_GROUP = "monitoring.coreos.com"


def _known(value) -> bool:
    """No UNKNOWN anywhere inside ``value``."""
    if value is UNKNOWN:
        return False
    if isinstance(value, dict):
        return all(_known(k) and _known(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set)):
        return all(_known(v) for v in value)
    return True


def _services(stack: Stack) -> list[tuple[object, object, object]]:
    """(namespace, labels, named ports) of every Service the stack declares; unknowns kept."""
    found = []
    for _, obj in stack.k8s_objects():
        if obj.kind != "Service" or obj.group != "":
            continue
        ports = as_list(get(obj.props, "spec", "ports"))
        names = UNKNOWN if not _known(ports) else {get(p, "name") for p in ports}
        found.append((obj.namespace, get(obj.props, "metadata", "labels", default={}), names))
    return found


def _matches(selector: dict, namespaces: set, service: tuple) -> object:
    """True/False, or UNKNOWN when the Service's namespace or labels are not known yet."""
    namespace, labels, _ = service
    if not _known(namespace) or not _known(labels):
        return UNKNOWN
    return namespace in namespaces and isinstance(labels, dict) and all(labels.get(k) == v for k, v in selector.items())


@stack_rule(
    "llm-serving-stack-monitor-selects-service",
    "Every ServiceMonitor selects at least one Service of the stack (its matchLabels within its "
    "namespaceSelector's namespaces, or its own) and scrapes a port those Services name, so the "
    "Prometheus Operator finds a target for it.",
    fix="Make the monitor's spec.selector.matchLabels a subset of the Service's labels and its "
    "endpoints[].port the name of a Service port (platform.metrics renders both from the model's "
    "Service).",
    severity="low",
)
def monitor_selects_service(stack: Stack, config: dict) -> Iterator[Finding]:
    services = _services(stack)
    for resource, obj in stack.k8s_objects():
        if obj.kind != "ServiceMonitor" or obj.group != MONITOR_GROUP:
            continue
        spec = get(obj.props, "spec", default={})
        if not _known(spec) or not _known(obj.namespace):
            yield unchecked(f"{obj.display}: what it selects", resource.urn)
            continue
        if get(spec, "namespaceSelector", "any") is True or get(spec, "selector", "matchExpressions"):
            continue  # selects beyond what the stack declares, or beyond a matchLabels subset test
        selector = get(spec, "selector", "matchLabels", default={})
        namespaces = get(spec, "namespaceSelector", "matchNames")
        endpoints = as_list(get(spec, "endpoints"))
        within = set(namespaces or [obj.namespace])
        matches = [(service, _matches(selector, within, service)) for service in services]
        selected = [service for service, match in matches if match is True]
        if not selected:
            if any(match is UNKNOWN for _, match in matches):
                yield unchecked(f"{obj.display}: the Services it selects", resource.urn)
            else:
                yield violation(f"{obj.display} selects no Service of the stack ({selector} in "
                                f"{', '.join(sorted(within))}): it scrapes nothing", resource.urn)
            continue
        for index, endpoint in enumerate(endpoints):
            port = get(endpoint, "port")
            if not isinstance(port, str):
                continue  # targetPort: not a Service port name
            # The operator keeps, per endpoint, the selected Services that name the port (the
            # router's monitor also selects its headless Service, which has no metrics port).
            if any(ports is not UNKNOWN and port in ports for _, _, ports in selected):
                continue
            if any(ports is UNKNOWN for _, _, ports in selected):
                yield unchecked(f"{obj.display}: the ports of the Services it selects", resource.urn)
            else:
                yield violation(f"{obj.display}: endpoints[{index}].port '{port}' is a named port of no "
                                "Service it selects; name the Service's port", resource.urn)
