"""The dynamic resources the components declare (program side; the providers do the work).

Each class's module/name make its type token (``pulumi-python:dynamic/llm-serving:<name>``),
which is part of every deployed resource's URN: renaming a class strands the deployed ones.
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

import pulumi
from pulumi.dynamic import Resource, ResourceProvider


class _Dynamic(Resource):
    # What the provider records beside the inputs: declared unknown, so the program can read them.
    OUTPUTS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name: str, props: dict[str, Any], provider: ResourceProvider,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(provider, name, {**props, **dict.fromkeys(self.OUTPUTS)}, opts)


class WeightsGate(_Dynamic, module="llm-serving", name="WeightsGate"):
    """Stands once a model's weights are complete and no puller pod holds their volume."""

    OUTPUTS = ("weights_ready", "completed_at")
    weights_ready: pulumi.Output[bool]
    completed_at: pulumi.Output[str]
    model_source: pulumi.Output[str]


class ModelStatus(_Dynamic, module="llm-serving", name="ModelStatus"):
    """PENDING | READY | ERROR | UNKNOWN, with a message, details and the routable targets."""

    OUTPUTS = ("state", "message", "reason", "details", "ready_replicas", "targets", "observed_at")
    state: pulumi.Output[str]
    message: pulumi.Output[str]
    reason: pulumi.Output[str]
    details: pulumi.Output[dict]
    ready_replicas: pulumi.Output[int]
    targets: pulumi.Output[list]
    observed_at: pulumi.Output[str]

    def summary(self) -> dict[str, pulumi.Output]:
        """What a model component exports as its ``status``."""
        return {"state": self.state, "message": self.message, "reason": self.reason,
                "ready_replicas": self.ready_replicas, "targets": self.targets}


class WorkloadKindGuard(_Dynamic, module="llm-serving", name="WorkloadKindGuard"):
    """The router's workload kind as last deployed."""

    kind: pulumi.Output[str]


class RouterTargets(_Dynamic, module="llm-serving", name="RouterTargets"):
    """Per fronted model, the pods the router forwards to (the backend router's computation)."""

    OUTPUTS = ("targets", "observed_at", "error")
    targets: pulumi.Output[dict]
    observed_at: pulumi.Output[str]
    error: pulumi.Output[str]


class RequiredCrds(_Dynamic, module="llm-serving", name="RequiredCrds"):
    """Stands once the cluster serves the custom resource definitions a setting needs."""

    OUTPUTS = ("checked_at",)
    checked_at: pulumi.Output[str]


class NimOperatorCheck(RequiredCrds, module="llm-serving", name="NimOperatorCheck"):
    """``RequiredCrds`` for an operator-path NIM model: the NIM operator's CRDs. Its own type name
    because deployed stacks hold it under that type (a new type would be a delete and a create)."""
