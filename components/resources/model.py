"""ModelServer: declares one model's plan; VllmModel and NimModel are its two type tokens.

Thin: the plan (children, their manifests or typed props, what each waits on) comes from
``components.compile.plan``; this class hands each child to pulumi-kubernetes or to its dynamic
provider with ``parent=self``, in the plan's order:

    raw (vLLM, NIM raw):  weights PVC ─▶ puller Job ─▶ WeightsGate ─▶ Deployment ─▶ Service ─▶ ModelStatus
    NIM operator:         NimOperatorCheck ─▶ NIMCache ─▶ NIMService ─▶ ModelStatus

Ownership is the component's: every object is its child, so removing the model from config (or
`pulumi destroy`) deletes them all. No Kubernetes ownerReference ties the weights volume to the
Deployment: a Deployment replacement would then garbage-collect the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from contract.props import GateProps, NimOperatorCheckProps, RequiredCrdsProps, StatusProps
from providers import crd_check, gate, resources, status

from .. import children as roles
from ..children import child as child_name
from ..compile.plan import PLATFORM, Child, ModelPlan, model_plan, next_role
from ..config.model import ModelConfig
from ..config.platform import ClusterConfig
from ..config.stack import StackConfig
from . import kubernetes as kube_resources
from .cluster_access import with_kubeconfig


@dataclass(frozen=True)
class Deploy:
    """Where and how to deploy, beside the config: Output-valued things stay out of config."""

    provider: Optional[pulumi.ProviderResource]
    cluster: ClusterConfig
    depends_on: tuple[pulumi.Resource, ...] = ()
    # A library user's kubeconfig content for the dynamic resources (cluster_access.py); None:
    # they read the cluster config's path and context.
    kubeconfig_content: Optional[pulumi.Input[str]] = None

    @property
    def rendering(self) -> bool:
        # In render mode no cluster exists: nothing to gate on, no status to read.
        return bool(self.cluster.render_yaml_to_directory)


def _dynamic(name: str, child: Child, opts: pulumi.ResourceOptions,
             kubeconfig_content: Optional[pulumi.Input[str]] = None) -> pulumi.Resource:
    """The dynamic resource (and its provider) for a child's typed props."""
    resource, provider = {
        GateProps: (resources.WeightsGate, gate.WeightsGateProvider),
        StatusProps: (resources.ModelStatus, status.ModelStatusProvider),
        NimOperatorCheckProps: (resources.NimOperatorCheck, crd_check.RequiredCrdsProvider),
        RequiredCrdsProps: (resources.RequiredCrds, crd_check.RequiredCrdsProvider),
    }[type(child.props)]
    props, opts = with_kubeconfig(child.props.to_dict(), kubeconfig_content, opts)
    return resource(name, props, provider(), opts)


class ModelServer(pulumi.ComponentResource):
    """Any model plan, raw or operator path: the children differ, the declaring does not."""

    endpoint_url: pulumi.Output[str]
    state: pulumi.Output[str]

    def __init__(self, type_token: str, model: ModelConfig, stack: StackConfig, deploy: Deploy,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(type_token, model.name, None, opts)
        self.plan: ModelPlan = model_plan(model, stack, deploy.cluster)
        child_opts = pulumi.ResourceOptions(parent=self, provider=deploy.provider)
        self.children: dict[str, pulumi.Resource] = {}
        for child, waits in self.plan.declared(deploy.rendering):
            depends = [d for role in waits for d in (deploy.depends_on if role == PLATFORM else (self.children[role],))]
            opts_for = pulumi.ResourceOptions.merge(child_opts, pulumi.ResourceOptions(
                depends_on=depends, replace_on_changes=list(child.replace_on_changes) or None,
                delete_before_replace=child.delete_before_replace or None,
                aliases=[pulumi.Alias(name=child_name(model.name, alias)) for alias in child.aliases] or None))
            name = child_name(model.name, child.logical)
            self.children[child.role] = (_dynamic(name, child, opts_for, deploy.kubeconfig_content)
                                         if child.props is not None
                                         else kube_resources.apply(name, child.manifest, opts_for))

        self.endpoint_url = pulumi.Output.from_input(self.plan.endpoint_url)
        outputs: dict = dict(self.plan.outputs)
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
    def __init__(self, model: ModelConfig, stack: StackConfig, deploy: Deploy,
                 opts: Optional[pulumi.ResourceOptions] = None):
        if model.engine != "vllm":
            raise ValueError(f"model '{model.name}' has engine '{model.engine}'; VllmModel serves vLLM only")
        super().__init__("llm-serving:index:VllmModel", model, stack, deploy, opts)
