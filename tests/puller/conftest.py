"""Fixtures for the puller tests: a Hub-compatible server on 127.0.0.1 that each test starts
itself (nothing here ever reaches the internet)."""

from __future__ import annotations

import pytest

from scripts.localmodel.hub_server import HubServer


@pytest.fixture
def hub(tmp_path):
    with HubServer(tmp_path / "hub") as server:
        yield server
