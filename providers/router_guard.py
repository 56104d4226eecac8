"""WorkloadKindGuard: the router's workload kind as last deployed, so a switch is never an accident.

Kubernetes cannot turn a StatefulSet into a Deployment in place. A config value alone cannot tell
whether an install exists, so the deployed kind lives in stack state and ``check`` refuses an
unacknowledged change at preview, before the workload (which depends on the guard) is touched.
Talks to no cluster.
"""

from __future__ import annotations

from typing import Any

from pulumi.dynamic import CheckFailure, CheckResult, CreateResult, DiffResult, ResourceProvider, UpdateResult

from contract.props import WorkloadKindProps
from contract.workload_kind import kind_change_problem

GUARD_KEYS = WorkloadKindProps.KEYS


class WorkloadKindGuardProvider(ResourceProvider):
    """Remembers the router's deployed workload kind; refuses an unacknowledged switch.

    Talks to no cluster: ``check`` compares the kind in state (old inputs) with the new one, at
    preview, before the workload is touched (the workload depends on the guard).
    """

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        problem = kind_change_problem(
            olds.get("kind") or None, news.get("kind"), news.get("migrate_from") or None,
            bool(news.get("kind_explicit", True)),
        )
        return CheckResult(news, [CheckFailure("kind", problem)] if problem else [])

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changes = [key for key in GUARD_KEYS if olds.get(key) != news.get(key)]
        return DiffResult(changes=bool(changes), replaces=[], delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=f"{props.get('router')}-workload-kind", outs=_outs(props))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=_outs(news))  # full outputs: the default would drop them


def _outs(props: dict[str, Any]) -> dict[str, Any]:
    return {key: props.get(key) for key in GUARD_KEYS}
