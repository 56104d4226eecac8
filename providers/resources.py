"""The dynamic resources the components declare (program side; the providers do the work)."""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource, ResourceProvider


class WeightsGate(Resource, module="llm-serving", name="WeightsGate"):
    """Stands once a model's weights are complete and no puller pod holds their volume."""

    weights_ready: pulumi.Output[bool]
    completed_at: pulumi.Output[str]
    model_source: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], provider: ResourceProvider,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(provider, name, {**props, "weights_ready": None, "completed_at": None}, opts)


class ModelStatus(Resource, module="llm-serving", name="ModelStatus"):
    """PENDING | READY | ERROR | UNKNOWN, with a message, details and the routable targets."""

    state: pulumi.Output[str]
    message: pulumi.Output[str]
    reason: pulumi.Output[str]
    details: pulumi.Output[dict]
    ready_replicas: pulumi.Output[int]
    targets: pulumi.Output[list]
    observed_at: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], provider: ResourceProvider,
                 opts: Optional[pulumi.ResourceOptions] = None):
        outs = dict.fromkeys(("state", "message", "reason", "details", "ready_replicas", "targets", "observed_at"))
        super().__init__(provider, name, {**props, **outs}, opts)

    def summary(self) -> dict[str, pulumi.Output]:
        """What a model component exports as its ``status``."""
        return {"state": self.state, "message": self.message, "reason": self.reason,
                "ready_replicas": self.ready_replicas, "targets": self.targets}


class WorkloadKindGuard(Resource, module="llm-serving", name="WorkloadKindGuard"):
    """The router's workload kind as last deployed."""

    kind: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], provider: ResourceProvider,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(provider, name, props, opts)


class RouterTargets(Resource, module="llm-serving", name="RouterTargets"):
    """Per fronted model, the pods the router forwards to (the backend router's computation)."""

    targets: pulumi.Output[dict]
    observed_at: pulumi.Output[str]
    error: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], provider: ResourceProvider,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(provider, name, {**props, "targets": None, "observed_at": None, "error": None}, opts)


class RequiredCrds(Resource, module="llm-serving", name="RequiredCrds"):
    """Stands once the cluster serves the custom resource definitions a setting needs."""

    checked_at: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], provider: ResourceProvider,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(provider, name, {**props, "checked_at": None}, opts)


class NimOperatorCheck(RequiredCrds, module="llm-serving", name="NimOperatorCheck"):
    """``RequiredCrds`` for an operator-path NIM model: the NIM operator's CRDs. Its own type name
    because deployed stacks hold it under that type (a new type would be a delete and a create)."""
