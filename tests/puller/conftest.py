"""Fixtures for the puller tests: a Hub-compatible server on 127.0.0.1 that each test starts
itself (nothing here ever reaches the internet), and the weights volume as a directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.compile import common
from scripts.localmodel.hub_server import HubServer


@pytest.fixture
def hub(tmp_path):
    with HubServer(tmp_path / "hub") as server:
        yield server


@pytest.fixture
def volume(tmp_path, monkeypatch) -> Path:
    """The weights volume: a directory the rendered containers' WEIGHTS_MOUNT points at."""
    mount = tmp_path / "model-store"
    mount.mkdir()
    monkeypatch.setattr(common, "WEIGHTS_MOUNT", str(mount))
    return mount
