"""Parse either form of `pulumi preview --json` output into steps, policy results and diagnostics.

Two inputs are accepted, both as pulumi 3.274 prints them:
- the streaming form, ``PULUMI_ENABLE_STREAMING_JSON_PREVIEW=1 pulumi preview --json``: one
  engine event per line. Steps are ``resourcePreEvent``s (old/new inputs, ``detailedDiff``,
  replace ``keys``); policy results are ``policyEvent``s (rule, enforcement level, message,
  resource URN) and ``policyAnalyzeSummaryEvent`` / ``policyAnalyzeStackSummaryEvent`` (rules
  passed and failed). The CLI runs this form.
- the default digest, ``pulumi preview --json``: one object with ``steps``. It carries no policy
  results at all (a mandatory violation shows only as "preview failed"), so the report says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

# The step ops of one replace (create-replacement + replace + delete-replaced, or discard).
REPLACE_OPS = {"replace", "create-replacement", "delete-replaced", "discard-replaced"}
# Errors that only say "the preview failed" (the cause is reported on its own, or is a mandatory
# policy violation, which the policy section lists).
NOISE = {"preview failed", "update failed", "Resource monitor has terminated, shutting down"}


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
    severity: str = ""                  # low | medium | high | critical; "" when the pack sets none

    # The message is the rule's description (the engine prefixes it), the finding, and then
    # (llm-serving pack 0.2.0 on) a line `Fix: ...`; pack 0.1 wrote the fix into the description.
    def _lines(self) -> list[str]:
        return [line for line in self.message.strip().splitlines() if line.strip()]

    @property
    def finding(self) -> str:
        """The rule's specific finding: between the description and the fix line."""
        lines = [line for line in self._lines() if not line.startswith("Fix:")]
        return " ".join(lines[1:]) if len(lines) > 1 else (lines[0] if lines else "")

    @property
    def fix(self) -> str:
        lines = self._lines()
        for line in reversed(lines[1:]):
            if line.startswith("Fix:"):
                return line[len("Fix:"):].strip()
        first = lines[0] if lines else ""
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
                raise ValueError(f"line {number} is not JSON ({error}); "
                                 "expected `pulumi preview --json` output") from None
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
                                                e.get("policyPackName", ""), e.get("severity", "")))
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



@dataclass
class Resource:
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
