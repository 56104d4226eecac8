"""A rule: a stable name, what it checks and why, how to fix a violation, how bad one is, and a
pure check function.

The parts map onto pulumi-policy's own policy fields (``pack.py``): ``description`` (what and
why), ``fix`` -> ``remediation_steps``, ``severity``, ``url`` (an upstream page explaining the
concern, where there is one). Pulumi Cloud shows those fields next to a violation; the CLI prints
only the description and the violation message, so ``pack.py`` also ends each message with the
fix. Rules know nothing about pulumi-policy. A rule is called directly in tests:
``rule(subject, config)`` returns its findings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from .kube import Finding, K8sObject, Stack

NAME = re.compile(r"^llm-serving-[a-z]+(-[a-z0-9]+)+$")
LEVELS = ("advisory", "mandatory", "disabled")
# pulumi-policy's Severity values (pulumi_policy.Severity, 1.21.0).
SEVERITIES = ("low", "medium", "high", "critical")


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    check: Callable[..., Iterable[Finding]]
    scope: str                                   # "resource" | "stack"
    fix: str = ""                                # how to fix a violation (remediation_steps)
    severity: str = ""                           # one of SEVERITIES
    url: Optional[str] = None                    # more about the concern (an upstream page)
    kinds: frozenset[str] = frozenset()          # resource rules: kinds the rule looks at
    config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # JSON schema, with defaults
    enforcement: str = "mandatory"

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ValueError(f"rule name '{self.name}' must look like llm-serving-<kind>-<rule>")
        if len(self.fix.strip()) < 20:
            raise ValueError(f"rule '{self.name}': say how to fix a violation in fix=... (its remediation steps)")
        if "Fix:" in self.description:
            raise ValueError(f"rule '{self.name}': the fix belongs in fix=..., not in the description")
        if self.severity not in SEVERITIES:
            raise ValueError(f"rule '{self.name}': severity must be one of {SEVERITIES}")
        if self.url is not None and not self.url.startswith("https://"):
            raise ValueError(f"rule '{self.name}': url must be an https:// address")
        if self.enforcement not in LEVELS:
            raise ValueError(f"rule '{self.name}': enforcement must be one of {LEVELS}")

    def settings(self, given: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        """Schema defaults overlaid with the pack config given for this rule."""
        values = {key: schema.get("default") for key, schema in self.config.items()}
        for key, value in (given or {}).items():
            if key in self.config and value is not None:
                values[key] = value
        return values

    def applies_to(self, obj: K8sObject) -> bool:
        return self.scope == "resource" and obj.kind in self.kinds

    def __call__(self, subject: Any, config: Optional[Mapping[str, Any]] = None) -> list[Finding]:
        settings = self.settings(config)
        if self.scope == "resource":
            if not isinstance(subject, K8sObject) or not self.applies_to(subject):
                return []
            return [finding for obj in subject.per_template() for finding in self.check(obj, settings)]
        if not isinstance(subject, Stack):
            raise TypeError(f"stack rule '{self.name}' takes a Stack")
        return list(self.check(subject, settings))


def resource_rule(name: str, description: str, kinds: Iterable[str], *, fix: str, severity: str,
                  url: Optional[str] = None,
                  config: Optional[Mapping[str, Mapping[str, Any]]] = None,
                  enforcement: str = "mandatory") -> Callable[[Callable[..., Iterable[Finding]]], Rule]:
    def wrap(check: Callable[..., Iterable[Finding]]) -> Rule:
        return Rule(name, description, check, "resource", fix, severity, url, frozenset(kinds), dict(config or {}),
                    enforcement)
    return wrap


def stack_rule(name: str, description: str, *, fix: str, severity: str, url: Optional[str] = None,
               config: Optional[Mapping[str, Mapping[str, Any]]] = None,
               enforcement: str = "mandatory") -> Callable[[Callable[..., Iterable[Finding]]], Rule]:
    def wrap(check: Callable[..., Iterable[Finding]]) -> Rule:
        return Rule(name, description, check, "stack", fix, severity, url, frozenset(), dict(config or {}), enforcement)
    return wrap


def violations(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if not f.unknown]
