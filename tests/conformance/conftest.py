"""Fixtures of the conformance suite (see testkit/stargate.py's docstring for how to use them)."""

from __future__ import annotations

import os
import uuid
from typing import Optional

import pytest

from testkit.stargate import Cluster, RouterStack, TlsFiles, require_binaries, stack_config


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.conformance)


@pytest.fixture(scope="session")
def stargate_bin():
    """The directory holding stargate, stargate-k8s-router and pylon (built if missing)."""
    return require_binaries()


@pytest.fixture
def cluster_namespace():
    """A fresh namespace on the simulated cluster (KUBECONFIG), deleted afterwards."""
    if not os.environ.get("KUBECONFIG"):
        pytest.fail("the backend-router tests need the simulated cluster (KUBECONFIG); run them through "
                    "scripts/test.sh")
    cluster = Cluster(f"conf-{uuid.uuid4().hex[:6]}")
    cluster.ensure_namespace()
    yield cluster
    cluster.cleanup()


@pytest.fixture
def router_stack(stargate_bin, tmp_path, request):
    started: list[RouterStack] = []

    def start(router: Optional[dict] = None, engines: int = 1, backend: bool = False,
              tls: Optional[TlsFiles] = None, cluster: Optional[Cluster] = None,
              release: str = "public-0.4", next_revision: Optional[dict] = None,
              pod_models: tuple[str, ...] = ()) -> RouterStack:
        router = dict(router or {})
        namespace = "llm-serving"
        if backend:
            if cluster is None:
                cluster = request.getfixturevalue("cluster_namespace")
            namespace = cluster.namespace
            router.setdefault("replicas", 2)  # a multi-replica Deployment: the backend router's topology
        if tls is not None:
            router.setdefault("tls", {"enabled": True, "existingSecret": "router-tls"})
        stack = RouterStack(stack_config(router, namespace=namespace, release=release, next_revision=next_revision),
                            stargate_bin, tmp_path / f"stack{len(started)}", engines=engines, tls=tls, cluster=cluster,
                            pod_models=pod_models)
        started.append(stack)
        return stack.start()

    yield start
    for stack in started:
        stack.stop()

