"""Stack-wide objects: the namespace and the models' ServiceAccount."""

from __future__ import annotations

from typing import Optional

import pulumi

from ..compile.rbac import compile_teardown_identity
from ..compile.stack import compile_model_service_account, compile_namespace
from ..config.model import StackConfig
from . import kubernetes as kube_resources


class Platform(pulumi.ComponentResource):
    def __init__(self, name: str, stack: StackConfig, provider: Optional[pulumi.ProviderResource],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("llm-serving:index:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        self.namespace = None
        deps: list[pulumi.Resource] = []
        if stack.platform.create_namespace:
            self.namespace = kube_resources.apply(f"{name}-namespace", compile_namespace(stack.platform), child)
            deps.append(self.namespace)
        self.service_account = kube_resources.apply(
            f"{name}-model-service-account", compile_model_service_account(stack.platform),
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=deps)),
        )
        after_namespace = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=deps))
        self.teardown = [
            kube_resources.apply(f"{name}-teardown-{manifest['kind'].lower()}", manifest, after_namespace)
            for manifest in compile_teardown_identity(stack)
        ]
        self.ready: tuple[pulumi.Resource, ...] = (*deps, self.service_account)
        self.register_outputs({"namespace": stack.platform.namespace})
