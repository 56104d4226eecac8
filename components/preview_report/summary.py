"""Steps grouped per component (each model, the router, the platform), each group said in a few
lines: what the change will do to the model's weights, its server pods, the router's workload.

Children are told apart by their role (components/children.py, the module the components name
them with): a child of model ``m`` in role ``r`` is ``m-r``. What is said, per model:
- weights PVC / puller Job / WeightsGate (or NIMCache) replaced: "weights will be re-downloaded",
  old and new source from the ``llm-serving.dev/model-source`` annotation of the old/new inputs;
- server Deployment (or NIMService) update touching the pod template: "GPU pods will restart"
  with what changed (image tag, args, resources, env, weights volume, ...); no template change:
  "metadata only", or a scale;
- the model component created / deleted: a new model / a removed model;
- the router's workload created as one kind and deleted as another: a kind change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional

from .. import children as roles
from ..children import child
from .changes import server_lines, short_keys, source, source_change
from .parsing import Preview, Resource, Step
from .paths import get_path

MODEL_TYPES = {"llm-serving:index:VllmModel": "vLLM", "llm-serving:index:NimModel": "NIM"}
ROUTER_TYPE = "llm-serving:index:RequestRouter"
PLATFORM_TYPE = "llm-serving:index:Platform"
OP_WORDS = {"create": "created", "delete": "deleted", "update": "updated",
            "replace": "replaced (delete + create)", "read": "read", "import": "imported"}


def roles_of(component_type: str) -> tuple[str, ...]:
    """The child roles a component of this type declares, longest first."""
    if component_type in MODEL_TYPES:
        return roles.MODEL_ROLES
    if component_type == ROUTER_TYPE:
        return roles.ROUTER_ROLES
    if component_type == PLATFORM_TYPE:
        return roles.PLATFORM_ROLES
    return ()


_SOURCE_HASH = re.compile(r"^[0-9a-f]{8}$")


def role_of(name: str, parent: str, component_type: str) -> Optional[str]:
    """The role of ``parent``'s child called ``name`` (None: not a child this report knows). A
    weights child is named after its source too (`<model>-weights-<hash>`), or by its role alone
    in stacks deployed before that."""
    for role in roles_of(component_type):
        if name == child(parent, role):
            return role
        prefix = child(parent, role) + "-"
        if role in roles.SOURCE_NAMED_ROLES and name.startswith(prefix) and _SOURCE_HASH.match(name[len(prefix):]):
            return role
    return None


def component_of(step: Step) -> tuple[str, str]:
    """(component type, component name) of a step: its parent's URN, else its URN's type chain
    (a step without a parent: the name less the longest child role it ends with)."""
    if step.type in MODEL_TYPES or step.type in (ROUTER_TYPE, PLATFORM_TYPE):
        return step.type, step.name
    if step.parent:
        parent_type = step.parent.rsplit("::", 2)[-2].rsplit("$", 1)[-1]
        return parent_type, step.parent.rsplit("::", 1)[-1]
    chain = step.urn.rsplit("::", 2)[-2].split("$")
    if len(chain) > 1:
        parent_type = chain[-2]
        name = step.name
        stem, _, suffix = name.rpartition("-")
        for role in roles_of(parent_type):
            if name.endswith(f"-{role}"):
                return parent_type, name[: -len(role) - 1]
            if role in roles.SOURCE_NAMED_ROLES and _SOURCE_HASH.match(suffix) and stem.endswith(f"-{role}"):
                return parent_type, stem[: -len(role) - 1]
        return parent_type, name
    return "", ""


@dataclass
class Section:
    kind: str                     # "model" | "router" | "platform" | "other"
    name: str
    detail: str = ""              # engine, router kind, ...
    lines: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.lines)


@dataclass
class Report:
    stack: str
    preview: Preview
    sections: list[Section]

    @property
    def models(self) -> list[Section]:
        return [s for s in self.sections if s.kind == "model"]


def _generic_line(resource: Resource) -> str:
    words = OP_WORDS.get(resource.op, resource.op)
    line = f"{resource.kind} `{resource.name}` {words}"
    keys = resource.replace_keys if resource.op == "replace" else resource.diff
    if keys and resource.op in ("update", "replace"):
        line += ": " + ", ".join(short_keys(keys))
    return line


def _bookkeeping(resource: Resource, parent: str, component_type: str) -> bool:
    """A dynamic resource that only records or waits: its updates follow from the changes reported."""
    return (resource.type.startswith("pulumi-python:dynamic/")
            and role_of(resource.name, parent, component_type) in roles.BOOKKEEPING_ROLES)


def _in_roles(resources: Iterable[Resource], name: str, component_type: str, wanted: tuple[str, ...]) -> list[Resource]:
    """``resources`` in ``wanted``'s order of roles (a replace's steps keep their own order)."""
    by_role: dict[str, list[Resource]] = {}
    for resource in resources:
        by_role.setdefault(role_of(resource.name, name, component_type) or "", []).append(resource)
    return [r for role in wanted for r in by_role.get(role, [])]


def _model_section(name: str, component_type: str, resources: list[Resource]) -> Section:
    section = Section("model", name, MODEL_TYPES.get(component_type, ""))
    component = next((r for r in resources if r.type == component_type and r.name == name), None)
    children = [r for r in resources if r is not component]
    if component is not None and component.op == "create":
        found = next((s for s in (source(r.new) for r in children) if s), None)
        section.lines.append("**new model: downloads weights" + (f" ({found})" if found else "") + ", then serves**")
        section.lines.extend(_sleep_lines(children, name, component_type))
        return section
    if component is not None and component.op == "delete":
        section.lines.append("**model removed: volume, puller and server deleted**")
        return section

    handled: set[str] = set()
    revision_lines, revision_urns = _revision_lines(children, name, component_type)
    section.lines.extend(revision_lines)
    handled.update(revision_urns)
    weights = [r for r in _in_roles(children, name, component_type, roles.MODEL_WEIGHTS_ROLES)
               if r.op in ("replace", "create", "delete") and r.urn not in handled]
    if weights:
        change = ""
        for resource in weights:
            change = source_change(source(resource.old), source(resource.new))
            if change:
                break
        if not change:
            # Weights named after their source (`<model>-weights-<hash>`): a new source is a create
            # of the new ones and a delete of the old, not a replace.
            olds = [found for found in (source(r.old) for r in weights if r.op == "delete") if found]
            news = [found for found in (source(r.new) for r in weights if r.op == "create") if found]
            change = source_change(olds[0], news[0]) if olds and news else ""
        if not change:
            keys = [k for r in weights for k in r.replace_keys]
            change = ("replaced: " + ", ".join(dict.fromkeys(keys))) if keys else "new weights volume"
        replaced = [r for r in weights if r.op == "replace"
                    or (r.op == "create" and any(other.op == "delete" for other in weights))]
        how = ("a new volume and puller download them, the server moves over once they are complete, "
               "then the old volume is deleted") if replaced else ""
        section.lines.append(f"**weights will be re-downloaded** ({change})" + (f": {how}" if how else ""))
        handled.update(r.urn for r in weights)
    for server in _in_roles(children, name, component_type, roles.MODEL_SERVER_ROLES):
        who = {"NIMService": "NIMService", "LeaderWorkerSet": "server LeaderWorkerSet"}.get(server.kind, "server Deployment")
        section.lines.extend(server_lines(server, pods="GPU pods", who=who))
        section.lines.extend(_per_pod_weights_lines(server))
        handled.add(server.urn)
    sleep = _sleep_lines(children, name, component_type)
    if sleep:
        section.lines.extend(sleep)
        handled.update(r.urn for r in children if role_of(r.name, name, component_type) == roles.SCALED_OBJECT)
    for resource in children:
        if resource.urn in handled or resource.op == "same" or _bookkeeping(resource, name, component_type):
            continue
        if role_of(resource.name, name, component_type) in roles.MODEL_WEIGHTS_ROLES and resource.op == "update":
            section.lines.append(_generic_line(resource) + " (weights are kept)")
            continue
        section.lines.append(_generic_line(resource))
    return section


def _revision_lines(children: list[Resource], name: str, component_type: str) -> tuple[list[str], set[str]]:
    """The next revision's (models[].next) lines and the URNs they cover: added, removed (and, when
    the model's own server changes with it, promoted), or its server's changes."""
    nexts = [r for r in children if r.op != "same" and r.name.startswith(child(name, roles.NEXT_ROLE_PREFIX))
             and role_of(r.name, name, component_type) in roles.NEXT_ROLES]
    server = next((r for r in nexts if role_of(r.name, name, component_type) == roles.NEXT_ROLE_PREFIX + roles.SERVER),
                  None)
    if server is None:
        return [], set()
    revision = child(name, roles.NEXT_ROLE_PREFIX.rstrip("-"))
    # The revision's weights are named as the model's (`<model>-weights-<hash>`): created with it,
    # deleted with it, or (a promote) kept by the model while the previous ones are deleted.
    weights = [r for r in _in_roles(children, name, component_type, roles.SOURCE_NAMED_ROLES)
               if r.op == ("create" if server.op == "create" else "delete")]
    covered = {r.urn for r in nexts} | {r.urn for r in weights}
    if server.op == "create":
        found = source(server.new)
        return [f"**next revision `{revision}` added**" + (f" ({found})" if found else "") + ": its weights are pulled "
                "and verified, then it serves beside the current revision; the gateway gives it its share of new "
                "conversations"], covered
    if server.op == "delete":
        own = next((r for r in _in_roles(children, name, component_type, roles.MODEL_SERVER_ROLES)
                    if r.op in ("update", "replace")), None)
        if own is None:
            how = "; the serving revision is untouched"
        else:
            kept = (" onto the revision's verified weights (no re-download; the previous ones are deleted after it)"
                    if weights else "")
            how = (f"; the model's server changes with it (a promote: it rolls to the new settings{kept}, its old "
                   "pods serving until the new ones are ready)")
        return [f"**next revision `{revision}` removed**: its objects are deleted{how}"], covered
    return server_lines(server, pods="GPU pods", who=f"next revision's Deployment `{revision}`"), {server.urn}


def _sleep_lines(children: list[Resource], name: str, component_type: str) -> list[str]:
    """Whether the model may now sleep (its ScaledObject's minReplicaCount 0), or no longer may."""
    for resource in children:
        if role_of(resource.name, name, component_type) != roles.SCALED_OBJECT or resource.op == "same":
            continue
        before = get_path(resource.old or {}, "spec.minReplicaCount") if resource.op != "create" else None
        after = get_path(resource.new or {}, "spec.minReplicaCount") if resource.op != "delete" else None
        if after == 0 and before != 0:
            idle = get_path(resource.new or {}, "spec.cooldownPeriod")
            return [f"**may sleep**: scaled to zero after {idle}s without requests; the first request after a "
                    "sleep is held at the gateway while a pod starts and loads the weights"]
        if before == 0 and after != 0:
            return ["**no longer sleeps**: " + (f"keeps at least {after} replica(s)" if after else "not autoscaled")]
    return []


def _per_pod_weights_lines(server: Resource) -> list[str]:
    """A multi-node model with per-pod weights (volumeClaimTemplates) has no volume, Job or gate to
    replace: a new source shows on its LeaderWorkerSet, whose pods pull it."""
    if server.kind != "LeaderWorkerSet" or server.op not in ("update", "replace"):
        return []
    if not get_path(server.new or {}, ["spec", "leaderWorkerTemplate", "volumeClaimTemplates"]):
        return []
    change = source_change(source(server.old), source(server.new))
    if not change:
        return []
    return [f"**weights will be re-downloaded into every pod's own volume** ({change}): one group at a time "
            "is down while its pods pull and verify them; the other groups keep serving"]


def _router_section(name: str, resources: list[Resource]) -> Section:
    section = Section("router", name)
    workload = [r for r in resources if r.name == child(name, roles.ROUTER_WORKLOAD)]
    created = [r for r in workload if r.op == "create"]
    deleted = [r for r in workload if r.op == "delete"]
    handled: set[str] = set()
    if created and deleted and {r.kind for r in created} != {r.kind for r in deleted}:
        section.lines.append(
            f"**router workload kind changes ({deleted[0].kind} → {created[0].kind}): delete + create "
            f"(downtime)** — the {created[0].kind} is created first and the {deleted[0].kind} deleted "
            f"last; requests in flight on the {deleted[0].kind}'s pods fail")
        handled.update(r.urn for r in created + deleted)
        section.detail = f"{deleted[0].kind} → {created[0].kind}"
    for resource in workload:
        if resource.urn in handled or resource.op == "same":
            continue
        if resource.op == "replace":
            section.lines.append(f"**router workload replaced ({resource.kind}): delete + create (downtime)** — "
                                 + ", ".join(short_keys(resource.replace_keys)))
        else:
            section.lines.extend(server_lines(resource, pods="router pods", who=f"router {resource.kind}")
                                 if resource.op == "update" else [_generic_line(resource)])
        section.detail = section.detail or resource.kind
        handled.add(resource.urn)
    component = next((r for r in resources if r.type == ROUTER_TYPE), None)
    if component is not None and component.op in ("create", "delete"):
        section.lines.insert(0, "**router added**" if component.op == "create" else "**router removed**")
        return section
    for resource in resources:
        if (resource.urn in handled or resource is component or resource.op == "same"
                or _bookkeeping(resource, name, ROUTER_TYPE)):
            continue
        section.lines.append(_generic_line(resource))
    return section


def summarize(preview: Preview, stack: str) -> Report:
    resources: dict[str, Resource] = {}
    components: dict[tuple[str, str], list[str]] = {}
    for step in preview.steps:
        resource = resources.setdefault(step.urn, Resource(step.urn, step.type, step.name))
        resource.steps.append(step)
        key = component_of(step)
        urns = components.setdefault(key, [])
        if step.urn not in urns:
            urns.append(step.urn)
    sections: list[Section] = []
    others: list[Resource] = []
    for (component_type, name), urns in components.items():
        members = [resources[u] for u in urns]
        if component_type in MODEL_TYPES:
            sections.append(_model_section(name, component_type, members))
        elif component_type == ROUTER_TYPE:
            sections.append(_router_section(name, members))
        elif component_type == PLATFORM_TYPE:
            platform = Section("platform", name)
            platform.lines = [_generic_line(r) for r in members if r.op != "same" and r.type != PLATFORM_TYPE
                              and not _bookkeeping(r, name, PLATFORM_TYPE)]
            sections.append(platform)
        else:
            others.extend(m for m in members if m.op != "same" and m.type != "pulumi:pulumi:Stack")
    if others:
        sections.append(Section("other", "stack", lines=[_generic_line(r) for r in others]))
    return Report(stack, preview, sections)
