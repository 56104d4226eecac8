"""The Platform's Namespace is retained on delete (issue 33): `pulumi destroy` forgets it instead
of deleting it, so the Secrets users created in it by hand survive; everything else the stack
declares is deleted as before. (On the real engine and cluster: tests/integration/test_local_stack.py.)"""

from __future__ import annotations

import pulumi
import pytest

from tests.support.component_kit import declare_stack, record_graph

STACK = {
    "platform": {"sharedMemorySizeLimit": "1Gi", "teardownIdentity": {"enabled": True}},
    "models": [{"name": "alpha", "source": {"repo": "org/alpha", "revision": "main"}, "resources": {"memory": "8Gi"}}],
}


@pytest.fixture
def graph(monkeypatch):
    return record_graph(monkeypatch)


@pulumi.runtime.test
def test_the_namespace_is_retained_and_not_protected(graph):
    declare_stack(STACK)
    opts = graph.opts["platform-namespace"]
    assert graph.manifests["platform-namespace"]["kind"] == "Namespace"
    assert opts.retain_on_delete is True
    # Protect would make every `pulumi destroy` fail until `pulumi state unprotect`.
    assert not opts.protect


@pulumi.runtime.test
def test_nothing_else_is_retained(graph):
    declare_stack(STACK)
    others = [name for name in graph.opts if name != "platform-namespace"]
    assert "platform-model-service-account" in others and len(others) > 2
    assert [name for name in others if graph.opts[name] and graph.opts[name].retain_on_delete] == []


@pulumi.runtime.test
def test_no_namespace_no_retained_object(graph):
    declare_stack({**STACK, "platform": {**STACK["platform"], "namespace": "theirs", "createNamespace": False}})
    assert "platform-namespace" not in graph.opts
    assert [name for name, opts in graph.opts.items() if opts and opts.retain_on_delete] == []
