"""ModelServer: declares one model's plan; VllmModel and NimModel are its two type tokens.

Thin: the plan (children, their manifests or typed props, what each waits on) is the stack
plan's (``components.compile.plan.StackPlan.models``); ``declare_plan`` (the loop every component uses) hands each child to
pulumi-kubernetes or to its dynamic provider with ``parent=self``, in the plan's order:

    raw (vLLM, NIM raw):  weights PVC ─▶ puller Job ─▶ WeightsGate ─▶ Deployment ─▶ Service ─▶ ModelStatus
    NIM operator:         NimOperatorCheck ─▶ NIMCache ─▶ NIMService ─▶ ModelStatus

Ownership is the component's: every object is its child, so removing the model from config (or
`pulumi destroy`) deletes them all. No Kubernetes ownerReference ties the weights volume to the
Deployment: a Deployment replacement would then garbage-collect the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from .. import children as roles
from ..compile.plan import PLATFORM, ModelPlan, next_role
from ..config.engines import engine_of
from ..config.engines.vllm import VLLM
from .declare import Fill, declare_plan


@dataclass(frozen=True)
class Deploy:
    """Where and how to deploy, beside the config: Output-valued things stay out of config."""

    provider: Optional[pulumi.ProviderResource]
    # In render mode no cluster exists: nothing to gate on, no status to read (``StackPlan.rendering``).
    rendering: bool
    depends_on: tuple[pulumi.Resource, ...] = ()
    # A library user's kubeconfig content for the dynamic resources (cluster_access.py); None:
    # they read the cluster config's path and context.
    kubeconfig_content: Optional[pulumi.Input[str]] = None
    # A library program's values known at deployment, put into each manifest, props and output
    # (declare.py); None: every value is in the config.
    fill: Optional[Fill] = None

    def filled(self, value: Any) -> Any:
        return self.fill(value, None) if self.fill else value


class ModelServer(pulumi.ComponentResource):
    """Any model plan, raw or operator path: the children differ, the declaring does not."""

    endpoint_url: pulumi.Output[str]
    state: pulumi.Output[str]

    def __init__(self, type_token: str, plan: ModelPlan, deploy: Deploy,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(type_token, plan.name, None, opts)
        self.plan = plan
        self.children: dict[str, pulumi.Resource] = declare_plan(
            plan.name, plan.declared(deploy.rendering),
            pulumi.ResourceOptions(parent=self, provider=deploy.provider),
            {PLATFORM: tuple(deploy.depends_on)}, deploy.kubeconfig_content, fill=deploy.fill)

        self.endpoint_url = pulumi.Output.from_input(deploy.filled(self.plan.endpoint_url))
        outputs: dict = deploy.filled(dict(self.plan.outputs))
        self.status = self.children.get(roles.STATUS)
        if self.status is None:
            self.state = pulumi.Output.from_input("UNKNOWN")
        else:
            self.state = self.status.state
            outputs["status"] = self.status.summary()
        # models[].next: the next revision's own status, beside its objects.
        self.next_status = self.children.get(next_role(roles.STATUS))
        if self.next_status is not None:
            outputs["next"] = {**outputs["next"], "status": self.next_status.summary()}
        self.outputs = outputs
        self.register_outputs(outputs)


class VllmModel(ModelServer):
    def __init__(self, plan: ModelPlan, deploy: Deploy, opts: Optional[pulumi.ResourceOptions] = None):
        if engine_of(plan.model) is not VLLM:
            raise ValueError(f"model '{plan.name}' has engine '{plan.model.engine}'; VllmModel serves vLLM only")
        super().__init__("llm-serving:index:VllmModel", plan, deploy, opts)
