"""Fixtures of the fault suite on the simulated cluster; the helpers are in fault_kit.py."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from testkit.harness import delete_namespaces, require_engine
from tests.support.fault_kit import Cluster, FaultProject


@pytest.fixture(scope="session")
def cluster():
    require_engine()
    view = Cluster()
    yield view
    view.cleanup()


@pytest.fixture(scope="module")
def scratch():
    """A private directory. Not tmp_path_factory: concurrent pytest sessions of the same user prune
    each other's basetemp (only the newest three are kept), which would delete a project copy and
    its state while its stack still has objects in the cluster."""
    path = Path(tempfile.mkdtemp(prefix="llm-serving-faults-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def fault_project(scratch, cluster):
    """``fault_project(lambda namespace: config)`` -> a FaultProject in a fresh namespace."""
    made: list[FaultProject] = []

    def make(config_for_namespace) -> FaultProject:
        suffix = uuid.uuid4().hex[:6]
        namespace = f"flt-{suffix}"
        root = scratch / f"project-{suffix}"
        root.mkdir()
        project = FaultProject(root, f"flt{suffix}", config_for_namespace(namespace))
        project.namespace = namespace
        made.append(project)
        return project

    yield make
    # No `pulumi destroy` (test_fault_destroy.py tests that): see delete_namespaces.
    delete_namespaces(cluster.core, [project.namespace for project in made])

