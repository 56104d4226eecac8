"""Fixtures for the real-engine tests; the harness itself is in harness.py."""

from __future__ import annotations

import uuid

import pytest

from tests.support.harness import Project, require_engine


@pytest.fixture(scope="module")
def make_project(tmp_path_factory):
    require_engine()
    made: list[Project] = []

    def make(config_for_namespace) -> Project:
        suffix = uuid.uuid4().hex[:6]
        namespace = f"it-{suffix}"
        project = Project(tmp_path_factory.mktemp("project"), f"it{suffix}", config_for_namespace(namespace))
        project.namespace = namespace
        made.append(project)
        return project

    yield make
    for project in made:
        project.destroy()


@pytest.fixture(scope="session")
def kube():
    require_engine()
    from kubernetes import client, config

    config.load_kube_config()
    return client
