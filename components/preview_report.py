"""CI preview report: `pulumi preview --json` -> a Markdown summary a reviewer acts on.

Pure: ``parse`` reads what pulumi printed, ``summarize`` says per model (and for the router and
the platform) what the change will do, ``render`` writes Markdown. ``preview_report`` composes
them. ``run_preview`` (the only function that runs anything) and ``command`` are what
``python -m components preview-report`` calls.

Two inputs are accepted, both as pulumi 3.274 prints them:
- the streaming form, ``PULUMI_ENABLE_STREAMING_JSON_PREVIEW=1 pulumi preview --json``: one
  engine event per line. Steps are ``resourcePreEvent``s (old/new inputs, ``detailedDiff``,
  replace ``keys``); policy results are ``policyEvent``s (rule, enforcement level, message,
  resource URN) and ``policyAnalyzeSummaryEvent`` / ``policyAnalyzeStackSummaryEvent`` (rules
  passed and failed). The CLI runs this form.
- the default digest, ``pulumi preview --json``: one object with ``steps``. It carries no policy
  results at all (a mandatory violation shows only as "preview failed"), so the report says so.

What is said, per model (logical names are the components' children, see
components/resources/model.py and router.py):
- weights PVC / puller Job / WeightsGate (or NIMCache) replaced: "weights will be re-downloaded",
  old and new source from the ``llm-serving.dev/model-source`` annotation of the old/new inputs;
- server Deployment (or NIMService) update touching the pod template: "GPU pods will restart"
  with what changed (image tag, args, resources, env, weights volume, ...); no template change:
  "metadata only", or a scale;
- the model component created / deleted: a new model / a removed model;
- the router's ``<name>-workload`` created as one kind and deleted as another: a kind change.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

SOURCE_ANNOTATION = "llm-serving.dev/model-source"
MODEL_TYPES = {"llm-serving:index:VllmModel": "vLLM", "llm-serving:index:NimModel": "NIM"}
ROUTER_TYPE = "llm-serving:index:RequestRouter"
PLATFORM_TYPE = "llm-serving:index:Platform"
GATE_TYPE = "pulumi-python:dynamic/llm-serving:WeightsGate"
# Dynamic resources that only record or wait: their updates follow from the changes reported.
BOOKKEEPING_SUFFIXES = ("-status", "-nim-status", "-nim-operator-check", "-workload-kind", "-targets", "-crd-check")
REPLACE_OPS = {"replace", "create-replacement", "delete-replaced", "discard-replaced"}
CHILD_SUFFIXES = ("-weights-gate", "-weights", "-puller", "-server", "-service", "-status",
                  "-network-policy", "-nim-cache", "-nim-service", "-nim-status", "-nim-operator-check")
# Errors that only say "the preview failed" (the cause is reported on its own, or is a mandatory
# policy violation, which the policy section lists).
NOISE = {"preview failed", "update failed", "Resource monitor has terminated, shutting down"}
OP_WORDS = {"create": "created", "delete": "deleted", "update": "updated",
            "replace": "replaced (delete + create)", "read": "read", "import": "imported"}


# ---- parsing ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    op: str
    urn: str
    type: str
    parent: str = ""
    old: Optional[dict] = None          # old inputs
    new: Optional[dict] = None          # new inputs
    diff: tuple[str, ...] = ()          # changed property paths (detailedDiff keys, or diffs)
    replace_keys: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class Violation:
    rule: str
    level: str
    message: str
    urn: str = ""
    pack: str = ""

    @property
    def finding(self) -> str:
        """The rule's specific finding: the engine prefixes the rule's description."""
        lines = [line for line in self.message.strip().splitlines() if line.strip()]
        return " ".join(lines[1:]) if len(lines) > 1 else (lines[0] if lines else "")

    @property
    def fix(self) -> str:
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return first.split("Fix:", 1)[1].strip() if "Fix:" in first else ""


@dataclass
class Preview:
    form: str                                    # "stream" | "digest"
    steps: list[Step] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    packs: dict[str, str] = field(default_factory=dict)          # pack name -> version
    passed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    changes: dict[str, int] = field(default_factory=dict)        # op -> count
    result: Optional[str] = None                 # "succeeded" | "failed" | None (unknown)

    @property
    def policies_reported(self) -> bool:
        return self.form == "stream"

    @property
    def stopped_early(self) -> bool:
        """An error other than policy violations: the plan below may be incomplete."""
        return bool(self.errors)

    @property
    def failed_run(self) -> bool:
        return self.result == "failed" or bool(self.errors) or any(v.level == "mandatory" for v in self.violations)


def _events(text: str) -> Optional[list[dict]]:
    stripped = text.strip()
    if not stripped:
        raise ValueError("the preview JSON is empty")
    try:
        whole = json.loads(stripped)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and ("steps" in whole or "changeSummary" in whole or "diagnostics" in whole):
        return None  # the digest
    if isinstance(whole, list):
        return whole
    if isinstance(whole, dict):
        return [whole]
    events = []
    for number, line in enumerate(stripped.splitlines(), 1):
        if line.strip():
            try:
                events.append(json.loads(line))
            except ValueError as error:
                raise ValueError(f"line {number} is not JSON ({error}); expected `pulumi preview --json` output") from None
    return events


def _diff_keys(detailed: Any, *fallbacks: Any) -> tuple[str, ...]:
    if isinstance(detailed, dict) and detailed:
        return tuple(detailed)
    for keys in fallbacks:
        if keys:
            return tuple(keys)
    return ()


def _inputs(state: Any) -> Optional[dict]:
    return state.get("inputs") if isinstance(state, dict) else None


def _parent(*states: Any) -> str:
    for state in states:
        if isinstance(state, dict) and state.get("parent"):
            return state["parent"]
    return ""


def _message(text: str) -> str:
    return text.strip()


def parse(text: str) -> Preview:
    """Either form of `pulumi preview --json` output -> a Preview."""
    events = _events(text)
    if events is None:
        return _parse_digest(json.loads(text))
    preview = Preview("stream")
    for event in events:
        if "resourcePreEvent" in event:
            meta = event["resourcePreEvent"].get("metadata") or {}
            old, new = meta.get("old"), meta.get("new")
            preview.steps.append(Step(
                op=meta.get("op", ""), urn=meta.get("urn", ""), type=meta.get("type", ""),
                parent=_parent(new, old), old=_inputs(old), new=_inputs(new),
                diff=_diff_keys(meta.get("detailedDiff"), meta.get("diffs")),
                replace_keys=tuple(meta.get("keys") or ()),
            ))
        elif "policyEvent" in event:
            e = event["policyEvent"]
            preview.violations.append(Violation(e.get("policyName", "?"), e.get("enforcementLevel", "?"),
                                                e.get("message", ""), e.get("resourceUrn", ""),
                                                e.get("policyPackName", "")))
            if e.get("policyPackName"):
                preview.packs.setdefault(e["policyPackName"], e.get("policyPackVersion", ""))
        elif "policyAnalyzeSummaryEvent" in event or "policyAnalyzeStackSummaryEvent" in event:
            e = event.get("policyAnalyzeSummaryEvent") or event.get("policyAnalyzeStackSummaryEvent")
            preview.passed.update(e.get("passed") or ())
            preview.failed.update(e.get("failed") or ())
            if e.get("policyPackName"):
                preview.packs.setdefault(e["policyPackName"], e.get("policyPackVersion", ""))
        elif "diagnosticEvent" in event:
            e = event["diagnosticEvent"]
            message = _message(e.get("message", ""))
            if not message or e.get("severity") in ("debug", "info", "info#err"):
                continue
            target = preview.errors if e.get("severity") == "error" else preview.warnings
            if message in NOISE:
                continue
            if message not in target:
                target.append(message)
        elif "summaryEvent" in event:
            e = event["summaryEvent"]
            preview.changes = dict(e.get("resourceChanges") or {})
            preview.result = e.get("result")
            for key, version in (e.get("PolicyPacks") or {}).items():
                preview.packs.setdefault(key.split("|", 1)[0], version)
    return preview


def _parse_digest(digest: dict) -> Preview:
    preview = Preview("digest", changes=dict(digest.get("changeSummary") or {}))
    for step in digest.get("steps") or []:
        old, new = step.get("oldState"), step.get("newState")
        preview.steps.append(Step(
            op=step.get("op", ""), urn=step.get("urn", ""),
            type=(new or old or {}).get("type", "") or step.get("urn", "").rsplit("::", 2)[-2].rsplit("$", 1)[-1],
            parent=_parent(new, old), old=_inputs(old), new=_inputs(new),
            diff=_diff_keys(step.get("detailedDiff"), step.get("diffReasons")),
            replace_keys=tuple(step.get("replaceReasons") or ()),
        ))
    for diagnostic in digest.get("diagnostics") or []:
        message = _message(diagnostic.get("message", ""))
        if message.startswith("error: "):
            message = message[len("error: "):]
        if not message:
            continue
        if message in NOISE:
            if diagnostic.get("severity") == "error":
                preview.result = "failed"  # the digest's only trace of a mandatory policy violation
            continue
        if diagnostic.get("severity") == "error":
            preview.errors.append(message)
        elif diagnostic.get("severity") == "warning":
            preview.warnings.append(message)
    return preview


# ---- property paths -----------------------------------------------------------------------

_SEGMENT = re.compile(r'\.?([A-Za-z0-9_\-$]+)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]')


def path_segments(path: str) -> list[Any]:
    """`spec.template.spec.containers[0].env[4].value` / `metadata.annotations["a/b"]` -> segments."""
    segments: list[Any] = []
    position = 0
    while position < len(path):
        match = _SEGMENT.match(path, position)
        if not match or match.end() == position:
            segments.append(path[position:])
            break
        name, index, quoted = match.groups()
        segments.append(int(index) if index is not None else (quoted if quoted is not None else name))
        position = match.end()
    return segments


def get_path(value: Any, path: str | list[Any]) -> Any:
    for segment in (path_segments(path) if isinstance(path, str) else path):
        if isinstance(segment, int) and isinstance(value, list) and 0 <= segment < len(value):
            value = value[segment]
        elif isinstance(segment, str) and isinstance(value, dict):
            value = value.get(segment)
        else:
            return None
    return value


# ---- summarizing --------------------------------------------------------------------------

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


@dataclass
class _Resource:
    """All steps of one URN (a replace is create-replacement + replace + delete-replaced)."""

    urn: str
    type: str
    name: str
    steps: list[Step] = field(default_factory=list)

    @property
    def ops(self) -> set[str]:
        return {s.op for s in self.steps}

    @property
    def op(self) -> str:
        ops = self.ops
        for op in ("create", "delete", "update", "read", "import"):
            if ops == {op}:
                return op
        if ops & REPLACE_OPS:
            return "replace"
        changed = ops - {"same"}
        return sorted(changed)[0] if changed else "same"

    @property
    def old(self) -> Optional[dict]:
        return next((s.old for s in self.steps if s.old), None)

    @property
    def new(self) -> Optional[dict]:
        return next((s.new for s in self.steps if s.new), None)

    @property
    def diff(self) -> tuple[str, ...]:
        keys: dict[str, None] = {}
        for step in self.steps:
            keys.update(dict.fromkeys(step.diff))
        return tuple(keys)

    @property
    def replace_keys(self) -> tuple[str, ...]:
        keys: dict[str, None] = {}
        for step in self.steps:
            keys.update(dict.fromkeys(step.replace_keys))
        return tuple(keys)

    @property
    def kind(self) -> str:
        return self.type.rsplit(":", 1)[-1]


def _component_of(step: Step) -> tuple[str, str]:
    """(component type, component name) of a step: its parent's URN, else its URN's type chain."""
    if step.type in MODEL_TYPES or step.type in (ROUTER_TYPE, PLATFORM_TYPE):
        return step.type, step.name
    if step.parent:
        parent_type = step.parent.rsplit("::", 2)[-2].rsplit("$", 1)[-1]
        return parent_type, step.parent.rsplit("::", 1)[-1]
    chain = step.urn.rsplit("::", 2)[-2].split("$")
    if len(chain) > 1:
        parent_type = chain[-2]
        name = step.name
        for suffix in CHILD_SUFFIXES:
            if name.endswith(suffix):
                return parent_type, name[: -len(suffix)]
        return parent_type, name
    return "", ""


def short_revision(value: str) -> str:
    return value[:12] if re.fullmatch(r"[0-9a-f]{40}", value or "") else value


def _source(inputs: Optional[dict]) -> Optional[str]:
    if not inputs:
        return None
    for path in (["metadata", "annotations", SOURCE_ANNOTATION], ["model_source"]):
        value = get_path(inputs, path)
        if isinstance(value, str) and value:
            return value
    return None


def source_change(old: Optional[str], new: Optional[str]) -> str:
    if not old or not new or old == new:
        return ""
    old_repo, _, old_rev = old.rpartition("@")
    new_repo, _, new_rev = new.rpartition("@")
    if old_repo == new_repo and old_rev and new_rev:
        return f"revision {short_revision(old_rev)} → {short_revision(new_rev)}"
    return f"source {old} → {new}"


def image_change(old: Any, new: Any) -> str:
    if not isinstance(old, str) or not isinstance(new, str) or old == new:
        return ""
    old_repo, old_tag = _split_image(old)
    new_repo, new_tag = _split_image(new)
    if old_repo == new_repo:
        return f"image tag {old_tag or '(none)'} → {new_tag or '(none)'}"
    return f"image {old} → {new}"


def _split_image(image: str) -> tuple[str, str]:
    if "@" in image:
        repo, _, digest = image.partition("@")
        return repo, "@" + digest[:19]
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        return image.rsplit(":", 1)[0], image.rsplit(":", 1)[1]
    return image, ""


def _words_changed(old: Any, new: Any) -> str:
    """A short token diff of two argument lists: `+`--max-model-len 4096``, `-`--enforce-eager``."""
    old_list = [str(x) for x in old] if isinstance(old, list) else []
    new_list = [str(x) for x in new] if isinstance(new, list) else []
    parts = []
    matcher = difflib.SequenceMatcher(a=old_list, b=new_list, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("delete", "replace") and i2 > i1:
            parts.append("-`" + " ".join(old_list[i1:i2]) + "`")
        if tag in ("insert", "replace") and j2 > j1:
            parts.append("+`" + " ".join(new_list[j1:j2]) + "`")
    return " ".join(parts)


def _quantity_words(path: list[Any]) -> str:
    # [..., "resources", "limits", "memory"] -> "memory limit"
    tail = [p for p in path if isinstance(p, str)][-2:]
    if len(tail) == 2 and tail[0] in ("limits", "requests"):
        return f"{tail[1]} {tail[0][:-1]}"
    return ".".join(str(p) for p in tail)


def _container_prefix(segments: list[Any]) -> Optional[int]:
    """Index of the segment after `containers[i]` / `initContainers[i]` in a pod-template path."""
    for i, segment in enumerate(segments[:-1]):
        if segment in ("containers", "initContainers") and isinstance(segments[i + 1], int):
            return i + 2
    return None


def template_changes(resource: _Resource, template_root: list[Any]) -> list[str]:
    """What changed in a pod template, in reviewer words (image tag, args, resources, ...)."""
    old, new = resource.old or {}, resource.new or {}
    reasons: dict[str, None] = {}
    other: dict[str, None] = {}
    seen_lists: set[tuple] = set()
    n = len(template_root)
    for key in resource.diff:
        segments = path_segments(key)
        if segments[:n] != template_root:
            continue
        at = _container_prefix(segments)
        if at is not None and at < len(segments):
            container = segments[:at]
            field_name = segments[at]
            if field_name == "image":
                change = image_change(get_path(old, segments), get_path(new, segments))
                reasons[change or "image"] = None
            elif field_name in ("args", "command"):
                list_path = tuple(container + [field_name])
                if list_path in seen_lists:
                    continue
                seen_lists.add(list_path)
                words = _words_changed(get_path(old, list(list_path)), get_path(new, list(list_path)))
                reasons[f"{field_name}: {words}" if words else field_name] = None
            elif field_name == "resources":
                before, after = get_path(old, segments), get_path(new, segments)
                reasons[f"{_quantity_words(segments)} {before} → {after}"
                        if isinstance(before, (str, int, float)) and isinstance(after, (str, int, float))
                        else "resources"] = None
            elif field_name == "env":
                index = segments[at + 1] if at + 1 < len(segments) and isinstance(segments[at + 1], int) else None
                names = {get_path(side, container + ["env", index, "name"]) for side in (old, new)} if index is not None else set()
                names.discard(None)
                reasons["env " + ", ".join(sorted(names)) if names else "env"] = None
            else:
                other[".".join(str(s) for s in segments[n:at + 1])] = None
            continue
        rest = segments[n:]
        if rest[:3] == ["spec", "volumes"] or (rest[:1] == ["spec"] and "persistentVolumeClaim" in rest):
            if "claimName" in rest:
                reasons["onto the new weights volume"] = None
                continue
        if rest[:2] == ["metadata", "annotations"] and rest[2:3] == [SOURCE_ANNOTATION]:
            continue  # follows the weights volume
        if rest[:2] == ["metadata", "labels"] and rest[2:3] and str(rest[2]).endswith("/source-hash"):
            continue
        other[".".join(str(s) for s in rest[:3])] = None
    if other:
        reasons["pod template: " + ", ".join(other)] = None
    return list(reasons)


def _server_lines(resource: _Resource, pods: str, who: str) -> list[str]:
    op = resource.op
    if op == "replace":
        keys = ", ".join(resource.replace_keys) or "immutable fields"
        return [f"**{who} replaced: delete + create (downtime)** — {keys} cannot change in place"]
    if op == "create":
        return [f"{who} created"]
    if op == "delete":
        return [f"{who} deleted: the model stops serving"]
    if op != "update":
        return []
    template_root = ["spec", "template"] if resource.kind != "NIMService" else ["spec"]
    touched = [k for k in resource.diff if path_segments(k)[: len(template_root)] == template_root]
    if resource.kind == "NIMService":
        touched = [k for k in touched if path_segments(k)[:2] != ["spec", "replicas"]]
    lines = []
    replicas = next((k for k in resource.diff if path_segments(k) == ["spec", "replicas"]), None)
    scale = ""
    if replicas:
        before, after = get_path(resource.old, "spec.replicas"), get_path(resource.new, "spec.replicas")
        scale = f"replicas {before} → {after}" + (": the model stops serving" if after == 0 else "")
    if touched:
        if resource.kind == "NIMService":
            reasons = _nim_service_changes(resource, touched)
        else:
            reasons = template_changes(resource, template_root)
        lines.append(f"**{pods} will restart** ({'; '.join(reasons) or 'pod template'})")
        if scale:
            lines.append(scale)
    elif scale:
        lines.append(f"scale only, {scale}" + ("" if scale.endswith("stops serving") else " (no pod restarts)"))
    elif resource.diff and all(path_segments(k)[:1] == ["metadata"] for k in resource.diff):
        lines.append("metadata only (no pod restarts): " + ", ".join(_short_keys(resource.diff)))
    elif resource.diff:
        lines.append(f"{who} updated, no pod restarts: " + ", ".join(_short_keys(resource.diff)))
    return lines


def _nim_service_changes(resource: _Resource, keys: list[str]) -> list[str]:
    reasons: dict[str, None] = {}
    old, new = resource.old or {}, resource.new or {}
    for key in keys:
        segments = path_segments(key)
        if segments[:2] == ["spec", "image"]:
            before = _nim_image(get_path(old, "spec.image"))
            after = _nim_image(get_path(new, "spec.image"))
            reasons[image_change(before, after) or "image"] = None
        elif segments[:2] == ["spec", "resources"]:
            reasons["resources"] = None
        elif segments[:2] in (["spec", "args"], ["spec", "command"]):
            reasons[str(segments[1])] = None
        elif segments[:2] == ["spec", "env"]:
            reasons["env"] = None
        else:
            reasons[".".join(str(s) for s in segments[:2])] = None
    return list(reasons)


def _nim_image(image: Any) -> Optional[str]:
    if isinstance(image, dict) and image.get("repository"):
        return f"{image['repository']}:{image.get('tag', '')}"
    return None


def _short_keys(keys: Iterable[str], limit: int = 4) -> list[str]:
    keys = list(keys)
    shown = [f"`{k}`" for k in keys[:limit]]
    if len(keys) > limit:
        shown.append(f"… ({len(keys) - limit} more)")
    return shown


def _generic_line(resource: _Resource) -> str:
    words = OP_WORDS.get(resource.op, resource.op)
    line = f"{resource.kind} `{resource.name}` {words}"
    keys = resource.replace_keys if resource.op == "replace" else resource.diff
    if keys and resource.op in ("update", "replace"):
        line += ": " + ", ".join(_short_keys(keys))
    return line


def _bookkeeping(resource: _Resource) -> bool:
    return resource.type.startswith("pulumi-python:dynamic/") and resource.name.endswith(BOOKKEEPING_SUFFIXES)


def _model_section(name: str, component_type: str, resources: list[_Resource]) -> Section:
    section = Section("model", name, MODEL_TYPES.get(component_type, ""))
    component = next((r for r in resources if r.type == component_type and r.name == name), None)
    children = [r for r in resources if r is not component]
    if component is not None and component.op == "create":
        source = next((s for s in (_source(r.new) for r in children) if s), None)
        section.lines.append("**new model: downloads weights" + (f" ({source})" if source else "") + ", then serves**")
        return section
    if component is not None and component.op == "delete":
        section.lines.append("**model removed: volume, puller and server deleted**")
        return section

    by_suffix = {suffix: [r for r in children if r.name == f"{name}{suffix}"] for suffix in CHILD_SUFFIXES}
    weights = [r for r in by_suffix["-weights"] + by_suffix["-puller"] + by_suffix["-weights-gate"]
               + by_suffix["-nim-cache"] if r.op in ("replace", "create", "delete")]
    handled: set[str] = set()
    if weights:
        change = ""
        for resource in weights:
            change = source_change(_source(resource.old), _source(resource.new))
            if change:
                break
        if not change:
            keys = [k for r in weights for k in r.replace_keys]
            change = ("replaced: " + ", ".join(dict.fromkeys(keys))) if keys else "new weights volume"
        replaced = [r for r in weights if r.op == "replace"]
        how = ("a new volume and puller download them, the server moves over once they are complete, "
               "then the old volume is deleted") if replaced else ""
        section.lines.append(f"**weights will be re-downloaded** ({change})" + (f": {how}" if how else ""))
        handled.update(r.urn for r in weights)
    for server in by_suffix["-server"] + by_suffix["-nim-service"]:
        who = "NIMService" if server.kind == "NIMService" else "server Deployment"
        section.lines.extend(_server_lines(server, pods="GPU pods", who=who))
        handled.add(server.urn)
    for resource in children:
        if resource.urn in handled or resource.op == "same" or _bookkeeping(resource):
            continue
        if resource.name in (f"{name}-weights", f"{name}-puller", f"{name}-weights-gate", f"{name}-nim-cache") \
                and resource.op == "update":
            section.lines.append(_generic_line(resource) + " (weights are kept)")
            continue
        section.lines.append(_generic_line(resource))
    return section


def _router_section(name: str, resources: list[_Resource]) -> Section:
    section = Section("router", name)
    workload = [r for r in resources if r.name == f"{name}-workload"]
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
                                 + ", ".join(_short_keys(resource.replace_keys)))
        else:
            section.lines.extend(_server_lines(resource, pods="router pods", who=f"router {resource.kind}")
                                 if resource.op == "update" else [_generic_line(resource)])
        section.detail = section.detail or resource.kind
        handled.add(resource.urn)
    component = next((r for r in resources if r.type == ROUTER_TYPE), None)
    if component is not None and component.op in ("create", "delete"):
        section.lines.insert(0, "**router added**" if component.op == "create" else "**router removed**")
        return section
    for resource in resources:
        if resource.urn in handled or resource is component or resource.op == "same" or _bookkeeping(resource):
            continue
        section.lines.append(_generic_line(resource))
    return section


def summarize(preview: Preview, stack: str) -> Report:
    resources: dict[str, _Resource] = {}
    components: dict[tuple[str, str], list[str]] = {}
    for step in preview.steps:
        resource = resources.setdefault(step.urn, _Resource(step.urn, step.type, step.name))
        resource.steps.append(step)
        key = _component_of(step)
        urns = components.setdefault(key, [])
        if step.urn not in urns:
            urns.append(step.urn)
    sections: list[Section] = []
    others: list[_Resource] = []
    for (component_type, name), urns in components.items():
        members = [resources[u] for u in urns]
        if component_type in MODEL_TYPES:
            sections.append(_model_section(name, component_type, members))
        elif component_type == ROUTER_TYPE:
            sections.append(_router_section(name, members))
        elif component_type == PLATFORM_TYPE:
            platform = Section("platform", name)
            platform.lines = [_generic_line(r) for r in members
                              if r.op != "same" and r.type != PLATFORM_TYPE and not _bookkeeping(r)]
            sections.append(platform)
        else:
            others.extend(m for m in members if m.op != "same" and m.type != "pulumi:pulumi:Stack")
    if others:
        sections.append(Section("other", "stack", lines=[_generic_line(r) for r in others]))
    return Report(stack, preview, sections)


# ---- Markdown -----------------------------------------------------------------------------

def _counts(changes: dict[str, int]) -> str:
    words = {"create": "to create", "update": "to update", "replace": "to replace", "delete": "to delete"}
    parts = [f"{changes[op]} {words[op]}" for op in ("create", "update", "replace", "delete") if changes.get(op)]
    return ", ".join(parts) if parts else "no changes"


def _policy_headline(preview: Preview) -> str:
    if not preview.policies_reported:
        return "policies: not in this JSON" + (" (the failure may be a mandatory violation)" if preview.failed_run else "")
    if not preview.packs and not preview.passed and not preview.violations:
        return "policies: no pack ran"
    mandatory = [v for v in preview.violations if v.level == "mandatory"]
    advisory = [v for v in preview.violations if v.level != "mandatory"]
    packs = ", ".join(f"{name} {version}".strip() for name, version in sorted(preview.packs.items()))
    if mandatory:
        return f"policies: ❌ {len(mandatory)} mandatory violation(s)" + (f", {len(advisory)} advisory" if advisory else "") + f" ({packs})"
    if advisory:
        return f"policies: ⚠️ {len(advisory)} advisory violation(s) ({packs})"
    return f"policies: ✅ {len(preview.passed)} rules passed ({packs})"


def _cell(text: str) -> str:
    return " ".join(text.split())


def _policy_section(preview: Preview) -> list[str]:
    out = ["### Policies", ""]
    if not preview.policies_reported:
        out += ["Not in this JSON: `pulumi preview --json` (pulumi 3.274) leaves policy results out of its "
                "JSON digest (a mandatory violation shows only as \"preview failed\"). Run "
                "`python -m components preview-report`, which sets `PULUMI_ENABLE_STREAMING_JSON_PREVIEW=1`.", ""]
        return out
    if not preview.packs and not preview.passed and not preview.violations:
        out += ["No policy pack ran (pass `--policy-pack policies`).", ""]
        return out
    if preview.violations:
        order = {"mandatory": 0, "advisory": 1}
        by_rule: dict[tuple[str, str], list[Violation]] = {}
        for v in sorted(preview.violations, key=lambda v: (order.get(v.level, 2), v.rule)):
            by_rule.setdefault((v.level, v.rule), []).append(v)
        for (level, rule), found in by_rule.items():
            fix = next((v.fix for v in found if v.fix), "")
            out.append(f"- **{level}** `{rule}`" + (f" — fix: {_cell(fix)}" if fix else ""))
            for v in sorted(found, key=lambda v: v.urn):
                resource = v.urn.rsplit("::", 1)[-1] if v.urn else "(stack)"
                out.append(f"  - `{resource}`: {_cell(v.finding)}")
        out.append("")
        if any(v.level == "mandatory" for v in preview.violations):
            out += ["Mandatory violations fail `pulumi preview` and block `pulumi up`.", ""]
    passed = sorted(preview.passed - preview.failed - {v.rule for v in preview.violations})
    if passed:
        out += [f"<details><summary>{len(passed)} rules passed</summary>", "",
                ", ".join(f"`{rule}`" for rule in passed), "", "</details>", ""]
    return out


def render(report: Report) -> str:
    preview = report.preview
    status = "❌ preview failed" if preview.failed_run else "preview succeeded"
    out = [f"## Pulumi preview: stack `{report.stack}`", "",
           f"**{_counts(preview.changes)}** · {status} · {_policy_headline(preview)}", ""]
    counts = _counts(preview.changes)
    if preview.stopped_early:
        counts = "the preview stopped early: the plan below is incomplete"
    out[2] = f"**{counts}** · {status} · {_policy_headline(preview)}"
    if preview.errors:
        out += ["### Errors", ""] + [f"```\n{e.strip()}\n```" for e in preview.errors] + [""]
    models = report.models
    changed = [s for s in models if s.changed]
    unchanged = [s for s in models if not s.changed]
    if models:
        out += ["### Models", ""]
        for section in changed:
            title = f"#### `{section.name}`" + (f" ({section.detail})" if section.detail else "")
            out += [title, ""] + [f"- {line}" for line in section.lines] + [""]
        if unchanged:
            label = "No change planned before the preview stopped" if preview.stopped_early else "Unchanged"
            out += [f"{label}: " + ", ".join(f"`{s.name}`" for s in unchanged), ""]
    for section in report.sections:
        if section.kind == "model" or not section.changed:
            continue
        title = {"router": f"### Router `{section.name}`", "platform": "### Platform",
                 "other": "### Other"}[section.kind]
        out += [title, ""] + [f"- {line}" for line in section.lines] + [""]
    if preview.warnings:
        out += ["### Warnings", ""] + [f"- {_cell(w)}" for w in preview.warnings] + [""]
    out += _policy_section(preview)
    return "\n".join(out).rstrip() + "\n"


def preview_report(text: str, stack: str) -> str:
    """`pulumi preview --json` output (either form) -> the Markdown report."""
    return render(summarize(parse(text), stack))


# ---- the command (runs pulumi) -----------------------------------------------------------

EXIT_PREVIEW_FAILED = 4
STREAMING = "PULUMI_ENABLE_STREAMING_JSON_PREVIEW"


class PreviewRunError(RuntimeError):
    pass


def preview_command(stack: str, policy_packs: Iterable[str] = (), policy_pack_configs: Iterable[str] = ()) -> list[str]:
    command = ["pulumi", "preview", "--json", "--non-interactive", "--stack", stack]
    for pack in policy_packs:
        command += ["--policy-pack", pack]
    for config in policy_pack_configs:
        command += ["--policy-pack-config", config]
    return command


def run_preview(stack: str, policy_packs: Iterable[str] = (), policy_pack_configs: Iterable[str] = (),
                cwd: Optional[str] = None, timeout: float = 900, env: Optional[dict] = None) -> str:
    """Run `pulumi preview --json` in its streaming form and return what it printed.

    A failing preview (a mandatory policy violation, a program error) still prints its events
    and is reported, not raised; no output at all, or a timeout, raises PreviewRunError.
    """
    import os
    import subprocess

    environment = {**(os.environ if env is None else env), STREAMING: "1"}
    command = preview_command(stack, policy_packs, policy_pack_configs)
    try:
        result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise PreviewRunError("the pulumi CLI is not on PATH (source the toolchain's env.sh)") from None
    except subprocess.TimeoutExpired:
        raise PreviewRunError(f"`{' '.join(command)}` did not finish within {timeout:g}s") from None
    if not result.stdout.strip():
        raise PreviewRunError(f"`{' '.join(command)}` printed no JSON (exit {result.returncode}):\n"
                              f"{result.stderr.strip()[-3000:]}")
    return result.stdout


def command(args: Any) -> int:
    """`python -m components preview-report`: exit 0, or 4 when the preview failed (the report
    is written either way), 1 when there was nothing to report."""
    import sys
    from pathlib import Path

    try:
        if args.json_in:
            text = sys.stdin.read() if args.json_in == "-" else Path(args.json_in).read_text()
        else:
            text = run_preview(args.stack, args.policy_pack or (), args.policy_pack_config or (),
                               cwd=args.cwd, timeout=args.timeout)
            if args.save_json:
                Path(args.save_json).write_text(text)
        preview = parse(text)
    except (PreviewRunError, OSError, ValueError) as error:
        print(f"preview-report: {error}", file=sys.stderr)
        return 1
    markdown = render(summarize(preview, args.stack))
    if args.out:
        Path(args.out).write_text(markdown)
    else:
        sys.stdout.write(markdown)
    return EXIT_PREVIEW_FAILED if preview.failed_run else 0
