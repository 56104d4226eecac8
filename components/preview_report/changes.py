"""What changed in one resource, in a reviewer's words: weights source, image, args, resources,
env, the pod template; and what that means for a server's pods."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any, Optional

from ..compile.common import MODEL_SOURCE_ANNOTATION as SOURCE_ANNOTATION
from .parsing import Resource
from .paths import get_path, path_segments


def short_revision(value: str) -> str:
    return value[:12] if re.fullmatch(r"[0-9a-f]{40}", value or "") else value


def source(inputs: Optional[dict]) -> Optional[str]:
    """The model source a child's inputs record: the annotation, or the WeightsGate's prop."""
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


def template_changes(resource: Resource, template_root: list[Any]) -> list[str]:
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
                names = ({get_path(side, container + ["env", index, "name"]) for side in (old, new)}
                         if index is not None else set())
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


def server_lines(resource: Resource, pods: str, who: str) -> list[str]:
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
    # Where the pods are described: a Deployment's template, a LeaderWorkerSet's leader and worker
    # templates (multiNode), a NIMService's whole spec.
    template_root = {"NIMService": ["spec"], "LeaderWorkerSet": ["spec", "leaderWorkerTemplate"]}.get(
        resource.kind, ["spec", "template"])
    touched = [k for k in resource.diff if path_segments(k)[: len(template_root)] == template_root]
    if resource.kind == "NIMService":
        touched = [k for k in touched if path_segments(k)[:2] != ["spec", "replicas"]]
    lines = []
    replicas = next((k for k in resource.diff if path_segments(k) == ["spec", "replicas"]), None)
    scale = ""
    if replicas:
        before, after = get_path(resource.old, "spec.replicas"), get_path(resource.new, "spec.replicas")
        scale = f"replicas {before} → {after}" + (": the model stops serving" if after == 0 else "")
        if after is None and before is not None and resource.kind == "Deployment":
            # autoscaling turned on: server-side apply drops the field the stack owned, and the
            # API server's default (1) holds until the autoscaler raises it (docs/05-day-2.md, Autoscaling).
            scale = (f"**replicas {before} → left to the autoscaler**: the count drops to 1 at this `up` "
                     "unless handed over first (docs/05-day-2.md, Autoscaling)")
    if touched:
        if resource.kind == "NIMService":
            reasons = _nim_service_changes(resource, touched)
        else:
            reasons = template_changes(resource, template_root)
        lines.append(f"**{pods} will restart** ({'; '.join(reasons) or 'pod template'})")
        if scale:
            lines.append(scale)
    elif scale:
        quiet = scale.endswith("stops serving") or "autoscaler" in scale
        lines.append(f"scale only, {scale}" + ("" if quiet else " (no pod restarts)"))
    elif resource.diff and all(path_segments(k)[:1] == ["metadata"] for k in resource.diff):
        lines.append("metadata only (no pod restarts): " + ", ".join(short_keys(resource.diff)))
    elif resource.diff:
        lines.append(f"{who} updated, no pod restarts: " + ", ".join(short_keys(resource.diff)))
    return lines


def _nim_service_changes(resource: Resource, keys: list[str]) -> list[str]:
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


def short_keys(keys: Iterable[str], limit: int = 4) -> list[str]:
    keys = list(keys)
    shown = [f"`{k}`" for k in keys[:limit]]
    if len(keys) > limit:
        shown.append(f"… ({len(keys) - limit} more)")
    return shown
