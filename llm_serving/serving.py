"""``ModelServing``: model servers (and a router with its OpenAI gateway) in a program of yours.

One component for the whole set, not one per model: the set's shared objects are compiled from
all of its models at once (the platform's RBAC, Secrets and dashboard list every model; a model's
pods carry the router's pylon sidecar and network paths only when the router fronts it), so a
model alone cannot be compiled. Inside, the same components the stack program declares
(``Platform``, ``VllmModel``/``NimModel``, ``RequestRouter``), parented here: their children and
Kubernetes objects are the stack program's, name for name.

Providers come from ``opts`` (``providers=[k8s_provider]``, or ``provider=``) and are inherited by
every child; nothing is declared with a default provider. The namespace is yours unless
``create_namespace``: give the Namespace resource in ``depends_on``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, Optional

import pulumi

from components import program
from components.compile.plan import stack_plan
from components.config import ConfigError, load_stack_config
from components.config.sources import ModelSource, S3Source
from components.config.stack import StackConfig
from components.resources.stack import declare

from . import inputs as deferred
from .args import ModelServingArgs
from .section import Inputs

TYPE = "llm-serving:index:ModelServing"


def stack_config_of(args: ModelServingArgs) -> StackConfig:
    """The validated stack config of ``args``; a bad value raises ValueError naming the argument
    (``models[0].source.repo``, in the stack config's names) and the fix, before any resource. A
    value not known yet (an Output) stands in it as a placeholder (llm_serving/section.py)."""
    return _validated(args)[0]


def _validated(args: ModelServingArgs) -> tuple[StackConfig, dict, Inputs]:
    if not isinstance(args, ModelServingArgs):
        raise TypeError(f"ModelServing takes a ModelServingArgs, not {type(args).__name__}")
    inputs = Inputs()
    config = args.to_config(inputs)
    try:
        stack = load_stack_config(config)
    except ConfigError as error:
        raise ValueError("invalid ModelServingArgs:\n" + "\n".join(f"  {_argument_path(p)}" for p in error.problems)) \
            from None
    problems = library_problems(args, stack)
    if problems:
        raise ValueError("invalid ModelServingArgs:\n" + "\n".join(f"  {p}" for p in problems))
    return stack, config, inputs


def library_problems(args: ModelServingArgs, stack: StackConfig) -> list[str]:
    """What a program would deploy and then find does not work, which a stack file (read by the
    stack program, with its own environment and docs) does not meet the same way."""
    problems = []
    if stack.router is not None and stack.router.pylon is None:
        # The router never discovers Services: each model registers through the pylon sidecar in
        # its pods. Without one the router starts, every model is READY, and nothing is routed.
        problems.append(
            "router.pylon: the router reaches models only through the pylon sidecar it puts in "
            "their pods, and none is set: it would deploy, and route to nothing. Give Router("
            "pylon=PylonConfig(image='<stargate-client image>'), worker_auth=WorkerAuth(mode='token', "
            "secret_name='<Secret>')) (docs/04-router-and-clients.md), or leave router out")
    return problems


def kubeconfig_problems(args: ModelServingArgs) -> list[str]:
    """Without ``kubeconfig_content``, the resources that read the cluster read a kubeconfig file
    where `up` runs: one that is not there fails `up` half-way (after the platform's objects),
    with the stack program's fixes. Checked where the program runs, at construction."""
    problems = []
    if args.kubeconfig_content is None and args.kubeconfig is None:
        missing = _no_ambient_kubeconfig()
        if missing:
            problems.append(
                f"kubeconfig_content: unset, so the resources that read the cluster (status, weights gate, "
                f"checks) would read the ambient kubeconfig, and {missing}; pass the kubeconfig your "
                "kubernetes.Provider is given as kubeconfig_content (content, kept secret), or the path of a "
                "kubeconfig file as kubeconfig")
    elif args.kubeconfig_content is None and not os.path.isfile(os.path.expanduser(args.kubeconfig or "")):
        problems.append(f"kubeconfig: {args.kubeconfig!r} is no file; give the path of the kubeconfig your "
                        "kubernetes.Provider uses, or its content as kubeconfig_content")
    return problems


def _no_ambient_kubeconfig() -> Optional[str]:
    """Why the ambient kubeconfig cannot be read where the program runs (None: it can, or the
    program runs in a pod, whose service account is its config)."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    named = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if any(os.path.isfile(os.path.expanduser(p)) for p in named or ["~/.kube/config"]):
        return None
    if named:
        return f"KUBECONFIG names {os.pathsep.join(named)}, which does not exist"
    return "KUBECONFIG is unset and ~/.kube/config does not exist"


def unpinned_warnings(stack: StackConfig) -> list[str]:
    """With preflight off (the library's default), revisions are not pinned (each pod downloads
    what a branch or tag points at when it starts) and S3 sources are not listed (the puller
    checks the copy against the listing's ETags and sizes only when there is one)."""
    lines = []
    for index, model in enumerate(stack.models):
        sources = [("source", model.source)] + ([("next.source", model.next.source)]
                                                if model.next is not None and model.next.source is not None else [])
        for where, source in sources:
            warning = _UNPINNED[source.type](f"models[{index}].{where}", source)
            if warning is not None:
                lines.append(warning)
    return lines


def _unpinned_revision(where: str, source: ModelSource) -> Optional[str]:
    if _COMMIT.match(source.revision):
        return None
    return (f"{where}.revision '{source.revision}' is not a commit: each pod downloads what it names when it starts, "
            "and two pods may serve different weights; give a 40-hex commit, or platform={'preflight': {'enabled': "
            "True}} to have it pinned")


def _unlisted_objects(where: str, source: S3Source) -> Optional[str]:
    return (f"{where}: the objects are copied without the preflight's listing, so the copy is not verified against "
            "one (a missing object, another size or a changed ETag goes unnoticed); platform={'preflight': "
            "{'enabled': True}} lists them before anything is declared")


# What preflight would have pinned, by `source.type`: a Hub revision (when it is not a commit), an S3
# prefix's listing; a pvc claim is what it is (its verify Job checks it either way).
_UNPINNED: dict[str, Callable[[str, Any], Optional[str]]] = {
    "hf": _unpinned_revision,
    "s3": _unlisted_objects,
    "pvc": lambda where, source: None,
}


_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _argument_path(problem: str) -> str:
    # `models.0.source.repo` -> `models[0].source.repo`, wherever the line names one: the list
    # the program built, indexed as it indexes it.
    return re.sub(r"\b(models|args|tolerations|imagePullSecrets)\.(\d+)\b", r"\1[\2]", problem)


class ModelServing(pulumi.ComponentResource):
    """Outputs: ``models`` (per model: its endpoint, status and objects, as the stack program
    exports them), ``endpoints`` (model name -> in-cluster URL), ``states`` (model name -> READY,
    PENDING, ...) and ``router`` (the router's and the gateway's URLs; None without a router)."""

    models: pulumi.Output[dict]
    endpoints: pulumi.Output[dict]
    states: pulumi.Output[dict]
    router: pulumi.Output[Optional[dict]]

    def __init__(self, name: str, args: ModelServingArgs, opts: Optional[pulumi.ResourceOptions] = None):
        stack, config, inputs = _validated(args)  # refused here: nothing is registered for a bad argument
        problems = kubeconfig_problems(args)
        if problems:
            raise ValueError("invalid ModelServingArgs:\n" + "\n".join(f"  {p}" for p in problems))
        carry = None
        if stack.platform.preflight.enabled:
            # Asked for in platform: the stack program's preflight (pins revisions, lists S3
            # sources, checks volume sizes), run here before anything is declared.
            token = args.hf_token if isinstance(args.hf_token, str) else None
            if args.hf_token is not None and token is None:
                pulumi.log.warn("hf_token is an Output, which the preflight cannot wait for: it asks the Hub without "
                                "it (a gated or private repo fails there); give the token as text, or turn the "
                                "preflight off and pin each revision to a commit")
            given = stack
            stack, _ = program.preflight(stack, stack_token=token)
            carry = deferred.carried(given, stack)
        else:
            for line in unpinned_warnings(stack):
                pulumi.log.warn(line)
        super().__init__(TYPE, name, None, opts)
        # The caller's depends_on (their Namespace, say) holds for the first objects too: the
        # platform's, on which every model and the router wait.
        plan = stack_plan(stack)
        fill = None
        if inputs:
            # Values known at deployment (the namespace, images): each object takes them where
            # the placeholder is written, once the set is valid with them.
            real = deferred.known(inputs, config, plan, f"{name}-platform",
                                  lambda resolved: library_problems(args, resolved),
                                  **({"carry": carry} if carry else {}))
            fill = deferred.filler(inputs, real)
        declared = declare(plan, platform_name=f"{name}-platform", parent=self,
                           depends_on=opts.depends_on if opts is not None else None,
                           secret_values=args.secret_values() or None,
                           kubeconfig_content=args.kubeconfig_content, fill=fill)
        self.servers, self.request_router = declared.servers, declared.router
        self.models = pulumi.Output.from_input({n: s.outputs for n, s in self.servers.items()})
        self.endpoints = pulumi.Output.from_input({n: s.endpoint_url for n, s in self.servers.items()})
        self.states = pulumi.Output.from_input({n: s.state for n, s in self.servers.items()})
        self.router = pulumi.Output.from_input(self.request_router.outputs if self.request_router else None)
        self.register_outputs({"models": self.models, "endpoints": self.endpoints, "states": self.states,
                               "router": self.router})
