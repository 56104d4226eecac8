"""The one declare loop: a plan's children, in the plan's order, handed to pulumi-kubernetes (a
manifest) or to their dynamic provider (typed props), each with ``parent`` and provider from the
component, what it waits on, its logical name, the names it had before (aliases) and its
replacement rules. Every component that declares a plan (the platform, each model, the router
with the gateway) calls ``declare_plan``, so a child's options mean the same in all of them.

What a child waits on is a role of the plan, or one of the plan's external names (``PLATFORM``,
``FRONTS``) the component maps to resources it was given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional

import pulumi

from contract.props import (
    GateProps,
    NimOperatorCheckProps,
    RequiredCrdsProps,
    RouterTargetsProps,
    StatusProps,
    WorkloadKindProps,
)
from providers import crd_check, gate, resources, router_guard, router_targets, status

from ..children import child as child_name
from ..compile.plan import Child, DynamicProps
from . import kubernetes as kube_resources
from .cluster_access import with_kubeconfig


def dynamic_kinds() -> dict[type, tuple[type, type]]:
    """Typed props -> (the program-side resource class, its dynamic provider). Read when a child
    is declared, so the component tests can record the classes (tests/support/component_kit.py
    replaces them in ``providers.resources``)."""
    return {
        GateProps: (resources.WeightsGate, gate.WeightsGateProvider),
        StatusProps: (resources.ModelStatus, status.ModelStatusProvider),
        NimOperatorCheckProps: (resources.NimOperatorCheck, crd_check.RequiredCrdsProvider),
        RequiredCrdsProps: (resources.RequiredCrds, crd_check.RequiredCrdsProvider),
        WorkloadKindProps: (resources.WorkloadKindGuard, router_guard.WorkloadKindGuardProvider),
        RouterTargetsProps: (resources.RouterTargets, router_targets.RouterTargetsProvider),
    }


# (value, where) -> value: ``where`` is a child's (owner, position in its plan), or None for a
# component's outputs.
Fill = Callable[[Any, Optional[tuple[str, int]]], Any]


def _dynamic(name: str, props: DynamicProps, opts: pulumi.ResourceOptions,
             kubeconfig_content: Optional[pulumi.Input[str]], fill: Optional[Fill],
             where: tuple[str, int]) -> pulumi.Resource:
    resource, provider = dynamic_kinds()[type(props)]
    wire, opts = with_kubeconfig(props.to_dict(), kubeconfig_content, opts)
    return resource(name, fill(wire, where) if fill else wire, provider(), opts)


def options(owner: str, child: Child, depends: list[pulumi.Resource]) -> pulumi.ResourceOptions:
    """What the plan says of a child, as Pulumi options (None where it says nothing, so the
    component's own options stand)."""
    return pulumi.ResourceOptions(
        depends_on=depends, replace_on_changes=list(child.replace_on_changes) or None,
        delete_before_replace=child.delete_before_replace or None,
        retain_on_delete=child.retain_on_delete or None,
        aliases=[pulumi.Alias(name=child_name(owner, alias)) for alias in child.aliases] or None)


def declare_plan(owner: str, children: Iterable[tuple[Child, tuple[str, ...]]], opts: pulumi.ResourceOptions,
            external: Mapping[str, Sequence[pulumi.Resource]], kubeconfig_content: Optional[pulumi.Input[str]] = None,
            resolve: Callable[[DynamicProps], DynamicProps] = lambda props: props,
            manifest_of: Callable[[Child], tuple[dict, pulumi.ResourceOptions]] = lambda c: (c.manifest, None),
            fill: Optional[Fill] = None) -> dict[str, pulumi.Resource]:
    """Declare ``children`` (a plan's ``declared(rendering)``: each child with the roles it waits
    on) as children named ``<owner>-<logical name>``; their resources by role.

    ``opts``: the component's (``parent``, ``provider``); ``external``: the resources behind the
    plan's external names; ``kubeconfig_content``: for the dynamic resources that read the cluster
    (cluster_access.py); ``resolve``: fills in what the pure plan cannot know (the router's fronted
    models' targets are Outputs); ``manifest_of``: a manifest child's object and extra options (the
    platform's stack secrets take their value here); ``fill``: puts a library program's values
    known only at deployment (a namespace from its Namespace resource) into each manifest and props,
    told the child's owner and position in its plan (llm_serving/inputs.py); None for the stack
    program, whose values are all known."""
    declared: dict[str, pulumi.Resource] = {}
    for position, (child, waits) in enumerate(children):
        depends = [d for role in waits for d in (external[role] if role in external else (declared[role],))]
        child_opts = pulumi.ResourceOptions.merge(opts, options(owner, child, depends))
        name = child_name(owner, child.logical)
        if child.props is not None:
            declared[child.role] = _dynamic(name, resolve(child.props), child_opts, kubeconfig_content, fill,
                                            (owner, position))
        else:
            manifest, extra = manifest_of(child)
            declared[child.role] = kube_resources.apply(name, fill(manifest, (owner, position)) if fill else manifest,
                                                        pulumi.ResourceOptions.merge(child_opts, extra))
    return declared
