"""Stack-wide objects: the namespace, the models' ServiceAccount, the teardown identity, the stack
secrets' Secrets, the check of every other operator's CRD the stack needs (``<platform>-required-crds``,
compile/crds.py) and, with ``platform.metrics.dashboard``, the Grafana dashboard ConfigMap. Thin, as
the models' and the router's components: the plan (``components.compile.plan.platform_plan``, which
`render` reads too) is declared by ``declare_plan``; ``ready`` (with the CRD check) is what every
model and the router wait on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

import pulumi

from ..compile.plan import CALLER, Child, PlatformPlan, platform_plan
from ..config.stack import StackConfig
from .declare import Fill, declare_plan


class Platform(pulumi.ComponentResource):
    def __init__(self, name: str, stack: StackConfig, provider: Optional[pulumi.ProviderResource],
                 opts: Optional[pulumi.ResourceOptions] = None,
                 secret_values: Optional[Mapping[str, pulumi.Input[str]]] = None,
                 kubeconfig_content: Optional[pulumi.Input[str]] = None, fill: Optional[Fill] = None):
        """``secret_values``: the stack secrets (``hfToken``, ``ngcApiKey``) as secret Outputs, from
        ``pulumi.Config.require_secret``; each becomes a Kubernetes Secret when a model reads it.
        ``kubeconfig_content``: for the CRD check, as for the models' (cluster_access.py); ``fill``:
        a library program's values known at deployment, as for the models' (declare.py)."""
        super().__init__("llm-serving:index:Platform", name, None, opts)
        # What the caller made us wait on (a library user's own Namespace, llm_serving): children
        # do not inherit a component's depends_on, so the first objects wait on it themselves.
        caller = _resources(opts.depends_on if opts is not None else None)
        self.plan: PlatformPlan = platform_plan(stack)
        values = secret_values or {}

        def manifest_of(child: Child) -> tuple[dict, Optional[pulumi.ResourceOptions]]:
            if child.secret is None:
                return child.manifest, None
            config_key, data_key = child.secret
            value = values.get(config_key)
            if value is None:
                raise ValueError(f"llm-serving:{config_key} is configured but its value was not passed")
            # A secret Output end to end: encrypted in the state, `[secret]` in previews and outputs.
            # (The provider stores it base64-encoded under `data`; its own RPC trace at `-v=9
            # --logflow` prints that form: never share such logs.)
            return ({**child.manifest, "stringData": {data_key: pulumi.Output.secret(value)}},
                    pulumi.ResourceOptions(additional_secret_outputs=["data", "stringData"]))

        self.children: dict[str, pulumi.Resource] = declare_plan(
            name, self.plan.declared(bool(stack.cluster.render_yaml_to_directory)),
            pulumi.ResourceOptions(parent=self, provider=provider), {CALLER: tuple(caller)},
            kubeconfig_content, manifest_of=manifest_of, fill=fill)
        self.ready: tuple[pulumi.Resource, ...] = (
            *caller, *(self.children[role] for role in self.plan.ready if role in self.children))
        self.register_outputs({"namespace": fill(stack.platform.namespace, None) if fill else stack.platform.namespace})


def _resources(depends_on) -> list[pulumi.Resource]:
    """``ResourceOptions.depends_on`` as a list (one resource, or a list of them)."""
    if depends_on is None:
        return []
    if isinstance(depends_on, pulumi.Resource):
        return [depends_on]
    return [d for d in depends_on if isinstance(d, pulumi.Resource)]
