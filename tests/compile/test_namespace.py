"""The namespace the stack creates: its Pod Security level follows what runs in it."""

from __future__ import annotations

from components.compile.stack import compile_namespace
from tests.support.builders import model, nim_model, stack

ENFORCE = "pod-security.kubernetes.io/enforce"


def labels_of(*models: dict) -> dict:
    return compile_namespace(stack(*models))["metadata"]["labels"]


def test_a_stack_of_our_own_workloads_enforces_restricted_and_nothing_looser():
    labels = labels_of(model("llama"), nim_model("nim-raw"))
    assert labels[ENFORCE] == "restricted"
    assert not any(key.startswith(("pod-security.kubernetes.io/warn", "pod-security.kubernetes.io/audit"))
                   for key in labels)


def test_an_operator_path_model_lowers_enforcement_to_baseline_and_keeps_restricted_as_warn_and_audit():
    # The NIM operator's pods (v3.1.2) carry no container securityContext: restricted refuses them.
    operator = nim_model("nim-op", path="operator", nim={"authSecret": "ngc-api"})
    labels = labels_of(model("llama"), operator)
    assert labels[ENFORCE] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"
