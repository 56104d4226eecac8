"""One real vLLM server per release line per session (testkit/engine.py: rendered, pulled and
started as `render` writes it). The session runs one line's server at a time (2 cores): the
fixture is parametrized by line, so pytest finishes one line's tests and stops its server before
the next.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.engine import pull_for, serving
from testkit.engine_kit import LINES


def pytest_configure(config):
    config.addinivalue_line("markers", "stops_engine: stops its line's shared vLLM server (the `engine` fixture): "
                            "runs after every other test that uses that server")


def pytest_collection_modifyitems(items):
    """This folder's tests that share a line's server, line by line, those that stop it last in
    their line (before pytest groups by fixture): every module sharing the server
    (test_rendered_server, test_whole_path) runs before it is stopped, and one line's server is
    gone before the next starts (2 cores). This folder's other tests follow them; the session's
    other tests keep their places (the hook sees them all: only this folder's slots are reordered)."""
    here = Path(__file__).parent
    slots = [index for index, item in enumerate(items) if here in Path(item.path).parents]

    def key(item) -> tuple[int, int, bool]:
        callspec = getattr(item, "callspec", None)
        line = callspec.params.get("engine") if callspec is not None else None
        if line not in LINES or "engine" not in item.fixturenames:
            return (1, 0, False)
        return (0, LINES.index(line), item.get_closest_marker("stops_engine") is not None)

    for index, item in zip(slots, sorted((items[i] for i in slots), key=key), strict=True):
        items[index] = item


@pytest.fixture(scope="session", params=LINES, ids=[f"vllm-{line}" for line in LINES])
def engine(request, tmp_path_factory):
    line = request.param
    tmp = tmp_path_factory.mktemp(f"engine-{line}")
    with serving(pull_for(line, tmp), tmp) as started:
        yield started
