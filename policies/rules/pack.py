"""The adapter between pure rules and pulumi-policy: the only module that imports it.

It converts what the engine sends (proxied props with unknown-value sentinels, PolicyResource
graphs) into the plain values the rules read, runs a rule, and reports:
- violations through ``report_violation``: the engine prefixes the rule's description, and each
  message ends with ``Fix: <the rule's fix>``, since the CLI prints only the description and the
  message (the fix, severity and url also go in pulumi-policy's own fields, ``remediation_steps``,
  ``severity``, ``url``, which Pulumi Cloud shows next to a violation);
- checks that need values unknown during preview as "not applicable: cannot be checked until
  apply", never as violations and never as an exception;
- a rule that fails unexpectedly as a violation naming the bug (fail closed, never crash the
  engine's analyzer call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)

from . import ALL_RULES
from .base import Rule
from .kube import UNKNOWN, UNKNOWN_SENTINELS, Finding, K8sObject, Stack, StackResource

try:  # the proxies that raise on unknown values; read their targets without tripping them
    from pulumi_policy.proxy import _DictProxy, _ListProxy
except ImportError:  # pragma: no cover - older/newer layouts: fall back to plain iteration
    _DictProxy = _ListProxy = ()  # type: ignore[assignment,misc]

LEVELS = {
    "advisory": EnforcementLevel.ADVISORY,
    "mandatory": EnforcementLevel.MANDATORY,
    "disabled": EnforcementLevel.DISABLED,
}
SEVERITIES = {severity.value: severity for severity in Severity}


def plain(value: Any) -> Any:
    """Engine props -> plain dicts/lists, with every unknown sentinel replaced by ``UNKNOWN``."""
    if isinstance(value, str):
        return UNKNOWN if value in UNKNOWN_SENTINELS else value
    if _DictProxy and isinstance(value, (_DictProxy, _ListProxy)):
        value = value["__target"]
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [plain(item) for item in value]
    return value


def stack_of(resources: Iterable[Any]) -> Stack:
    """pulumi_policy.PolicyResource objects (with their dependency graph) -> a Stack."""
    converted = []
    for resource in resources:
        deps = [d.urn for d in (resource.dependencies or [])]
        for group in (resource.property_dependencies or {}).values():
            deps.extend(d.urn for d in group)
        provider = getattr(resource, "provider", None)
        converted.append(StackResource(
            type=resource.resource_type, name=resource.name, urn=resource.urn,
            props=plain(resource.props), dependencies=tuple(dict.fromkeys(deps)),
            provider_props=plain(provider.props) if provider is not None else None,
        ))
    return Stack(tuple(converted))


def run(rule: Rule, subject: Any, config: Optional[Mapping[str, Any]], report: ReportViolation,
        not_applicable: Callable[[str], None]) -> None:
    """Run one rule and report its findings; never raises except through ``not_applicable``."""
    try:
        findings: list[Finding] = rule(subject, plain(dict(config or {})))
    except Exception as error:  # noqa: BLE001 - a rule bug must not crash the engine's analysis
        report(f"the rule could not run ({type(error).__name__}: {error}); this is a bug in the "
               "llm-serving policy pack: report it, or disable the rule in the pack config", None)
        return
    problems = [f for f in findings if not f.unknown]
    for finding in problems:
        report(f"{finding.message}\nFix: {rule.fix}", finding.urn)
    pending = [f.message for f in findings if f.unknown]
    if pending and not problems:
        # Raises the engine's not-applicable signal: shown, never blocking.
        not_applicable("; ".join(dict.fromkeys(pending)))


def to_policy(rule: Rule) -> Policy:
    schema = PolicyConfigSchema(properties={k: dict(v) for k, v in rule.config.items()}) if rule.config else None
    level = LEVELS[rule.enforcement]
    fields = {"severity": SEVERITIES[rule.severity], "remediation_steps": rule.fix, "url": rule.url}
    if rule.scope == "resource":
        def validate_resource(args: ResourceValidationArgs, report: ReportViolation) -> None:
            obj = K8sObject.from_type(args.resource_type, plain(args.props), args.name, args.urn)
            if obj is None or not rule.applies_to(obj):
                return
            run(rule, obj, args.get_config(), report, args.not_applicable)

        return ResourceValidationPolicy(rule.name, rule.description, validate_resource,
                                        enforcement_level=level, config_schema=schema, **fields)

    def validate_stack(args: StackValidationArgs, report: ReportViolation) -> None:
        try:
            stack = stack_of(args.resources)
        except Exception as error:  # noqa: BLE001
            report(f"the stack graph could not be read ({type(error).__name__}: {error}); this is a "
                   "bug in the llm-serving policy pack", None)
            return
        run(rule, stack, args.get_config(), report, args.not_applicable)

    return StackValidationPolicy(rule.name, rule.description, validate_stack,
                                 enforcement_level=level, config_schema=schema, **fields)


def policies(rules: Optional[Iterable[Rule]] = None) -> list[Policy]:
    return [to_policy(rule) for rule in (ALL_RULES if rules is None else rules)]
