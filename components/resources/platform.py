"""Stack-wide objects: the namespace, the models' ServiceAccount and, with ``platform.metrics``,
the check for the Prometheus Operator's CRD (in ``ready``: every model waits on it) and the
Grafana dashboard ConfigMap."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

import pulumi

from contract.props import STACK_CRDS_OWNER, ClusterTarget, CrdRequirement, RequiredCrdsProps
from providers import resources as dynamic
from providers.crd_check import RequiredCrdsProvider

from .. import children as roles
from ..children import child as child_name
from ..compile.crds import stack_required_crds
from ..compile.dashboard import compile_dashboard
from ..compile.rbac import compile_teardown_identity
from ..compile.secrets import stack_secrets
from ..compile.stack import compile_model_service_account, compile_namespace
from ..config.stack import StackConfig
from . import kubernetes as kube_resources
from .cluster_access import with_kubeconfig


class Platform(pulumi.ComponentResource):
    def __init__(self, name: str, stack: StackConfig, provider: Optional[pulumi.ProviderResource],
                 opts: Optional[pulumi.ResourceOptions] = None,
                 secret_values: Optional[Mapping[str, pulumi.Input[str]]] = None,
                 kubeconfig_content: Optional[pulumi.Input[str]] = None):
        """``secret_values``: the stack secrets (``hfToken``, ``ngcApiKey``) as secret Outputs, from
        ``pulumi.Config.require_secret``; each becomes a Kubernetes Secret when a model reads it.
        ``kubeconfig_content``: for the metrics check, as for the models' (cluster_access.py)."""
        super().__init__("llm-serving:index:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        self.namespace = None
        # What the caller made us wait on (a library user's own Namespace, llm_serving): children
        # do not inherit a component's depends_on, so the first objects wait on it themselves.
        deps: list[pulumi.Resource] = _resources(opts.depends_on if opts is not None else None)
        if stack.platform.create_namespace:
            # Retained on delete: `pulumi destroy` deletes every object the stack declared, then
            # only forgets the Namespace, so the Secrets users created in it by hand (the HF token,
            # the gateway's API keys, the NGC key the docs tell them to `kubectl create`) survive;
            # deleting a Namespace deletes all it holds. Not `protect`: that would fail every
            # destroy until `pulumi state unprotect`. A later `up` adopts the Namespace again
            # (server-side apply creates an existing object as an update).
            self.namespace = kube_resources.apply(
                child_name(name, roles.NAMESPACE), compile_namespace(stack),
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=True)))
            deps.append(self.namespace)
        self.service_account = kube_resources.apply(
            child_name(name, roles.MODEL_SERVICE_ACCOUNT), compile_model_service_account(stack.platform),
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=deps)),
        )
        after_namespace = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=deps))
        self.teardown = [
            kube_resources.apply(f"{name}-teardown-{manifest['kind'].lower()}", manifest, after_namespace)
            for manifest in compile_teardown_identity(stack)
        ]
        # Never when rendering: the rendered file would hold the value in plain text.
        self.secrets = [] if stack.cluster.render_yaml_to_directory else [
            self._secret(name, secret, (secret_values or {}).get(secret.config_key), after_namespace)
            for secret in stack_secrets(stack)
        ]
        # Every CRD the stack needs, checked here first (compile/crds.py): a cluster missing
        # several operators stops the preview naming each, with the setting and the fix, before
        # any model or router object (and their own checks) is declared.
        self.crd_check: Optional[pulumi.Resource] = None
        requirements = stack_required_crds(stack)
        if requirements and not stack.cluster.render_yaml_to_directory:
            props, check_opts = with_kubeconfig(RequiredCrdsProps(
                STACK_CRDS_OWNER, tuple(CrdRequirement.from_dict(r) for r in requirements),
                ClusterTarget.of(stack.cluster),
            ).to_dict(), kubeconfig_content, after_namespace)
            self.crd_check = dynamic.RequiredCrds(child_name(name, roles.STACK_CRD_CHECK), props,
                                                  RequiredCrdsProvider(), check_opts)
        dashboard = compile_dashboard(stack)
        self.dashboard = None if dashboard is None else kube_resources.apply(
            child_name(name, roles.DASHBOARD), dashboard, after_namespace)
        checks = () if self.crd_check is None else (self.crd_check,)
        self.ready: tuple[pulumi.Resource, ...] = (*deps, self.service_account, *self.secrets, *checks)
        self.register_outputs({"namespace": stack.platform.namespace})

    @staticmethod
    def _secret(name: str, secret, value: Optional[pulumi.Input[str]],
                opts: pulumi.ResourceOptions) -> pulumi.Resource:
        if value is None:
            raise ValueError(f"llm-serving:{secret.config_key} is configured but its value was not passed")
        # A secret Output end to end: encrypted in the state, `[secret]` in previews and outputs.
        # (The provider stores it base64-encoded under `data`; its own RPC trace at `-v=9 --logflow`
        # prints that form: never share such logs.)
        manifest = {**secret.manifest, "stringData": {secret.ref.key: pulumi.Output.secret(value)}}
        return kube_resources.apply(
            f"{name}-{secret.ref.name}", manifest,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["data", "stringData"])),
        )


def _resources(depends_on) -> list[pulumi.Resource]:
    """``ResourceOptions.depends_on`` as a list (one resource, or a list of them)."""
    if depends_on is None:
        return []
    if isinstance(depends_on, pulumi.Resource):
        return [depends_on]
    return [d for d in depends_on if isinstance(d, pulumi.Resource)]
