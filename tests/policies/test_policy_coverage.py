"""Every rule has a pass test (the compiled stack, cluster and rendering) and at least one
failure case (one mutation of it)."""

from __future__ import annotations

import pytest
import test_policy_cpu
import test_policy_disruption
import test_policy_gateway
import test_policy_gpu
import test_policy_images
import test_policy_metrics
import test_policy_pods
import test_policy_rbac
import test_policy_revisions
import test_policy_router
import test_policy_stack

from policies.rules import ALL_RULES
from tests.support.policy_helpers import compliant, messages, run

FAIL_CASES = [
    case
    for module in (test_policy_pods, test_policy_images, test_policy_gpu, test_policy_rbac,
                   test_policy_router, test_policy_stack, test_policy_disruption, test_policy_metrics, test_policy_gateway,
                   test_policy_revisions, test_policy_cpu)
    for case in module.FAIL_CASES
]


@pytest.mark.parametrize("rendering", [False, True], ids=["cluster", "rendering"])
@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.name)
def test_every_rule_passes_the_compiled_stack(rule, rendering):
    findings = run(rule, compliant(rendering))
    assert findings == [], messages(findings)


def test_every_rule_has_a_failure_case():
    failing = {case.rule.name for case in FAIL_CASES}
    assert [rule.name for rule in ALL_RULES if rule.name not in failing] == []

