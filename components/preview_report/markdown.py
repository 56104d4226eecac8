"""A summarized preview -> the Markdown a reviewer reads on a pull request."""

from __future__ import annotations

from .parsing import Preview, Violation
from .summary import Report


def _counts(changes: dict[str, int]) -> str:
    words = {"create": "to create", "update": "to update", "replace": "to replace", "delete": "to delete"}
    parts = [f"{changes[op]} {words[op]}" for op in ("create", "update", "replace", "delete") if changes.get(op)]
    return ", ".join(parts) if parts else "no changes"


def _policy_headline(preview: Preview) -> str:
    if not preview.policies_reported:
        maybe = " (the failure may be a mandatory violation)" if preview.failed_run else ""
        return "policies: not in this JSON" + maybe
    if not preview.packs and not preview.passed and not preview.violations:
        return "policies: no pack ran"
    mandatory = [v for v in preview.violations if v.level == "mandatory"]
    advisory = [v for v in preview.violations if v.level != "mandatory"]
    packs = ", ".join(f"{name} {version}".strip() for name, version in sorted(preview.packs.items()))
    if mandatory:
        also = f", {len(advisory)} advisory" if advisory else ""
        return f"policies: ❌ {len(mandatory)} mandatory violation(s){also} ({packs})"
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
            severity = next((v.severity for v in found if v.severity), "")
            out.append(f"- **{level}** `{rule}`" + (f" (severity {severity})" if severity else "")
                       + (f" — fix: {_cell(fix)}" if fix else ""))
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
