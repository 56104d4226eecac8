"""NimModel: one NVIDIA NIM model server, on one of two paths (``path`` in the model's config).

raw: the vLLM path's objects and order (``ModelServer``) with NIM's image, environment, health
path and uid/gid:

    weights PVC ─▶ puller Job ─▶ WeightsGate ─▶ Deployment ─▶ Service ─▶ ModelStatus

operator: custom resources for the k8s-nim-operator, which renders the Deployment and Service:

    NimOperatorCheck ─▶ NIMCache ─▶ NIMService ─▶ ModelStatus (NimStatusProvider)

The check fails early, with install instructions, on a cluster without the operator's CRDs; only
operator-path models declare it, so vLLM and raw-path stacks never need the CRDs. The NIMService
names the cache (the operator holds it NotReady until the cache is Ready) and is declared after
it. Both custom resources are children of this component, so removing the model deletes them,
and the operator's owner references remove what it rendered.
"""

from __future__ import annotations

from typing import Optional

import pulumi

from ..compile import nim as nim_compile
from ..config.model import ModelConfig, StackConfig
from .. import children as roles
from ..children import child as child_name
from . import kubernetes as kube_resources
from .model import Deploy, ModelServer, spec_revision

TYPE_TOKEN = "llm-serving:index:NimModel"


class NimModel(ModelServer):
    endpoint_url: pulumi.Output[str]
    state: pulumi.Output[str]

    def __init__(self, model: ModelConfig, stack: StackConfig, deploy: Deploy,
                 opts: Optional[pulumi.ResourceOptions] = None):
        if model.engine != "nim":
            raise ValueError(f"model '{model.name}' has engine '{model.engine}'; NimModel serves NIM only")
        if not model.on_operator:
            super().__init__(TYPE_TOKEN, model, stack, deploy, opts)
            return
        pulumi.ComponentResource.__init__(self, TYPE_TOKEN, model.name, None, opts)
        self._operator_path(model, stack, deploy)

    def _operator_path(self, model: ModelConfig, stack: StackConfig, deploy: Deploy) -> None:
        manifests = nim_compile.compile_nim_operator(model, stack)
        names = manifests.names
        platform = stack.platform
        child = pulumi.ResourceOptions(parent=self, provider=deploy.provider)

        def after(*deps: pulumi.Resource, **extra) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(deps), **extra))

        cluster = {"kubeconfig": deploy.cluster.kubeconfig or "", "context": deploy.cluster.context or ""}
        cache_after: list[pulumi.Resource] = list(deploy.depends_on)
        self.operator_check = None
        if not deploy.rendering:
            from providers.nim_status import NimOperatorCheck, NimOperatorCheckProvider

            self.operator_check = NimOperatorCheck(child_name(model.name, roles.NIM_OPERATOR_CHECK), {
                "model": model.name, "crds": list(nim_compile.CRD_NAMES), **cluster,
            }, NimOperatorCheckProvider(), after(*deploy.depends_on))
            cache_after = [self.operator_check]
        # The NIMCache spec is immutable: never patch it. Its name carries a digest of the spec,
        # so a change is a new cache created before the old one is deleted.
        self.nim_cache = kube_resources.apply(child_name(model.name, roles.NIM_CACHE), manifests.cache,
                                          after(*cache_after, replace_on_changes=["spec"]))
        serve_after: list[pulumi.Resource] = [self.nim_cache]
        self.network_policy = None
        if manifests.network_policy is not None:
            # platform.networkPolicy: in place before the operator starts a server pod.
            self.network_policy = kube_resources.apply(child_name(model.name, roles.NETWORK_POLICY), manifests.network_policy,
                                                       after(*deploy.depends_on))
            serve_after.append(self.network_policy)
        self.nim_service = kube_resources.apply(child_name(model.name, roles.NIM_SERVICE), manifests.service, after(*serve_after))

        url = nim_compile.endpoint_url(model, platform)
        self.endpoint_url = pulumi.Output.from_input(url)
        outputs: dict = {
            "endpoint_url": url,
            "path": "operator",
            "objects": {"nim_cache": names.cache, "nim_service": names.service},
        }
        if deploy.rendering:
            self.state = pulumi.Output.from_input("UNKNOWN")
        else:
            from providers.nim_status import NimStatusProvider
            from providers.resources import ModelStatus

            self.status = ModelStatus(child_name(model.name, roles.STATUS), {
                "namespace": platform.namespace,
                "model": model.name,
                "nim_service": names.service,
                "nim_cache": names.cache,
                "endpoint_url": url,
                "service_revision": spec_revision(manifests.service),
                "pending_timeout_seconds": platform.pending_timeout_seconds,
                # Caching is part of this wait: the download's budget plus the server's.
                "ready_timeout_seconds": platform.pull_timeout_seconds + platform.startup_timeout_seconds
                + platform.pending_timeout_seconds,
                **cluster,
            }, NimStatusProvider(), after(self.nim_service))
            self.state = self.status.state
            outputs["status"] = self.status.summary()
        self.outputs = outputs
        self.register_outputs(outputs)
