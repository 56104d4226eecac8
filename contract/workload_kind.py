"""The router's workload-kind guard: the one rule for when a kind switch may be applied.

Kubernetes cannot turn a StatefulSet into a Deployment in place; the deploy-time guard
(``providers.router_guard``) applies this rule against the kind recorded in the stack's state, so
neither an edit nor a changed default can flip an existing install without
``workload.migrateFrom`` saying so.
"""

from __future__ import annotations

from typing import Optional


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
