"""llm-serving policy pack: assembles the rules of ``rules/`` into one PolicyPack.

Run with `pulumi preview --policy-pack policies` from the project root. Enforcement levels and
rule settings (allowed uid/gid per engine, ...) come from a pack config file:
`--policy-pack-config policies/config.example.json`.
"""

import os
import sys

# The language host runs this file by path; make `rules` importable however it is started.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pulumi_policy import EnforcementLevel, PolicyPack
from rules.pack import policies

PolicyPack(
    name="llm-serving",
    policies=policies(),
    enforcement_level=EnforcementLevel.MANDATORY,
    description="Checks what burned us: uid/gid per engine, RBAC, image names, GPU settings, "
    "router topology and weight gating.",
)
