"""What the library's mock tests share: a kubeconfig where the program runs, and the graph a
program declares under Pulumi mocks."""

from __future__ import annotations

import pulumi
import pytest

from tests.support.component_kit import Mocks, record_graph


@pytest.fixture
def kubeconfig(tmp_path, monkeypatch):
    """A kubeconfig file where the program runs: without kubeconfig_content the library reads it
    (and refuses to start without one)."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return path


@pytest.fixture
def graph(monkeypatch):
    pulumi.runtime.set_mocks(Mocks(), preview=False)
    return record_graph(monkeypatch)
