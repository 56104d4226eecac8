"""The llm-serving rules, pure and importable; ``pack.py`` turns them into pulumi-policy
policies and ``policies/__main__.py`` only assembles them."""

from __future__ import annotations

from . import cpu, disruption, gateway, gpu, images, metrics, pods, rbac, revisions, router, stack
from .base import Rule

ALL_RULES: tuple[Rule, ...] = (
    pods.engine_identity,
    pods.puller_server_identity_match,
    pods.run_as_non_root,
    pods.no_privilege_escalation,
    pods.no_privileged,
    pods.no_host_path,
    pods.service_links_disabled,
    images.fully_qualified,
    images.no_latest,
    images.pinned,
    gpu.shm_size_limit,
    gpu.gpu_limits,
    rbac.no_wildcards,
    rbac.no_cluster_admin,
    rbac.teardown_verbs,
    rbac.teardown_least_privilege,
    rbac.backend_router_scope,
    router.topology,
    router.backend_target,
    router.drain,
    gateway.read_only_root,
    gateway.strips_caller_headers,
    gateway.router_behind_gateway,
    gateway.keys_guard_router,
    stack.server_weights_gate,
    disruption.drain_grace,
    disruption.topology_spread,
    disruption.disruption_budget,
    metrics.monitor_selects_service,
    gpu.nim_multinode_shape,
    revisions.controllers_own_their_pods,
    revisions.wakes_from_zero,
    cpu.cpu_server_settings,
)

__all__ = ["ALL_RULES", "Rule"]
