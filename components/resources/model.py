"""VllmModel: one model server, staged P0 storage → P1 pull → P2 hand-off → P3 serve.

Thin: the manifests come from ``components.compile``; this class only hands them to
pulumi-kubernetes with ``parent=self`` and wires the order:

    weights PVC ─▶ puller Job ─▶ WeightsGate ─▶ Deployment ─▶ Service ─▶ ModelStatus

Ownership is the component's: every object is its child, so removing the model from config (or
`pulumi destroy`) deletes them all. No Kubernetes ownerReference ties the weights volume to the
Deployment: a Deployment replacement would then garbage-collect the weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Optional

import pulumi

from ..compile import compile_model
from ..compile.server import endpoint_url
from ..config.model import ClusterConfig, ModelConfig, StackConfig
from .. import children as roles
from ..children import child as child_name
from . import kubernetes as kube_resources


@dataclass(frozen=True)
class Deploy:
    """Where and how to deploy, beside the config: Output-valued things stay out of config."""

    provider: Optional[pulumi.ProviderResource]
    cluster: ClusterConfig
    depends_on: tuple[pulumi.Resource, ...] = ()

    @property
    def rendering(self) -> bool:
        # In render mode no cluster exists: nothing to gate on, no status to read.
        return bool(self.cluster.render_yaml_to_directory)


def spec_revision(manifest: dict) -> str:
    """A stable digest of what a rollout changes, so status waits again only when it changes."""
    return hashlib.sha256(json.dumps(manifest["spec"], sort_keys=True).encode()).hexdigest()[:16]


class ModelServer(pulumi.ComponentResource):
    """Shared by VllmModel and NimModel (raw path): the objects differ only by engine."""

    endpoint_url: pulumi.Output[str]
    state: pulumi.Output[str]

    def __init__(self, type_token: str, model: ModelConfig, stack: StackConfig, deploy: Deploy,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(type_token, model.name, None, opts)
        manifests = compile_model(model, stack)
        names = manifests.names
        child = pulumi.ResourceOptions(parent=self, provider=deploy.provider)

        def after(*deps: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(deps)))

        self.weights = kube_resources.apply(child_name(model.name, roles.WEIGHTS), manifests.weights_pvc,
                                            after(*deploy.depends_on))
        self.puller = kube_resources.apply(child_name(model.name, roles.PULLER), manifests.puller_job, after(self.weights))
        serve_after: list[pulumi.Resource] = [self.puller]
        self.network_policy = None
        if manifests.network_policy is not None:
            # platform.networkPolicy: in place before the first server pod can accept a connection.
            self.network_policy = kube_resources.apply(child_name(model.name, roles.NETWORK_POLICY), manifests.network_policy,
                                                       after(*deploy.depends_on))
        self.gate = None
        if not deploy.rendering:
            from providers.gate import WeightsGateProvider
            from providers.resources import WeightsGate

            self.gate = WeightsGate(names.gate, {
                "namespace": stack.platform.namespace,
                "model": model.name,
                "weights_claim": names.weights,
                "puller_job": names.puller,
                "model_source": model.source.ref,
                "deadline_seconds": stack.platform.pull_timeout_seconds,
                "kubeconfig": deploy.cluster.kubeconfig or "",
                "context": deploy.cluster.context or "",
            }, WeightsGateProvider(), after(self.puller))
            serve_after = [self.gate]
        if self.network_policy is not None:
            serve_after.append(self.network_policy)
        self.deployment = kube_resources.apply(child_name(model.name, roles.SERVER), manifests.deployment, after(*serve_after))
        self.service = kube_resources.apply(child_name(model.name, roles.SERVICE), manifests.service, after(self.deployment))

        url = endpoint_url(model, stack.platform)
        self.endpoint_url = pulumi.Output.from_input(url)
        outputs: dict = {
            "endpoint_url": url,
            "objects": {
                "weights": names.weights, "puller": names.puller,
                "deployment": names.server, "service": names.service,
            },
        }
        if deploy.rendering:
            self.state = pulumi.Output.from_input("UNKNOWN")
        else:
            from providers.resources import ModelStatus
            from providers.status import ModelStatusProvider

            self.status = ModelStatus(child_name(model.name, roles.STATUS), {
                "namespace": stack.platform.namespace,
                "model": model.name,
                "deployment": names.server,
                "service": names.service,
                "puller_job": names.puller,
                "endpoint_url": url,
                "deployment_revision": spec_revision(manifests.deployment),
                "pending_timeout_seconds": stack.platform.pending_timeout_seconds,
                "ready_timeout_seconds": stack.platform.startup_timeout_seconds + stack.platform.pending_timeout_seconds,
                "kubeconfig": deploy.cluster.kubeconfig or "",
                "context": deploy.cluster.context or "",
            }, ModelStatusProvider(), after(self.deployment, self.service))
            self.state = self.status.state
            outputs["status"] = self.status.summary()
        self.outputs = outputs
        self.register_outputs(outputs)


class VllmModel(ModelServer):
    def __init__(self, model: ModelConfig, stack: StackConfig, deploy: Deploy,
                 opts: Optional[pulumi.ResourceOptions] = None):
        if model.engine != "vllm":
            raise ValueError(f"model '{model.name}' has engine '{model.engine}'; VllmModel serves vLLM only")
        super().__init__("llm-serving:index:VllmModel", model, stack, deploy, opts)
