"""Fixtures for the real-engine tests; the harness itself is in harness.py."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from testkit.harness import Project, delete_namespaces, require_engine
from tests.support.keda import KEDA_CRD, operators


@pytest.fixture(scope="module")
def make_project(kube):
    """``make_project(lambda namespace: config)`` -> a Project in a fresh namespace ``it-<hex>``.

    Torn down by deleting the namespaces (testkit/harness.py ``delete_namespaces``), not by
    `pulumi destroy`: the tests that prove destroy (test_local_stack, test_disruption,
    test_multinode*, test_nim_*, test_sources, test_state_compat, tests/faults/test_fault_destroy)
    run it themselves. The projects live in a private directory, not tmp_path_factory's:
    concurrent pytest sessions of the same user prune each other's basetemp (only the newest three
    are kept), which would delete a project and its state while the module still uses them."""
    require_engine()
    scratch = Path(tempfile.mkdtemp(prefix="llm-serving-it-"))
    made: list[Project] = []

    def make(config_for_namespace) -> Project:
        suffix = uuid.uuid4().hex[:6]
        namespace = f"it-{suffix}"
        project = Project(scratch / f"project-{suffix}", f"it{suffix}", config_for_namespace(namespace))
        project.namespace = namespace
        made.append(project)
        return project

    yield make
    delete_namespaces(kube.CoreV1Api(), [project.namespace for project in made])
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def kube():
    require_engine()
    from kubernetes import client, config

    config.load_kube_config()
    return client



@pytest.fixture(scope="module")
def keda_crd_installed(kube):
    """KEDA's ScaledObject CRD (a module that installs it makes sure first, with an autouse
    fixture, that it was absent: tests/support/keda.py ``KEDA_CRD.absent_until_installed``)."""
    KEDA_CRD.install(kube)


@pytest.fixture(scope="module")
def keda_operator(keda_crd_installed, kube, tmp_path_factory):
    """``start(namespace)`` -> (the operator's process, its log): KEDA's operator watching
    ``namespace``, stopped when the module ends (tests/support/keda.py)."""
    yield from operators(kube, tmp_path_factory.mktemp("keda-certs"))
