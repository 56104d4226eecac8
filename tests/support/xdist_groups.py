"""A pytest plugin for running the cluster tier side by side: `-p tests.support.xdist_groups -n N`
(pytest-xdist, requirements-dev.txt). The cluster modules wait on the API server and the engine,
not the CPU, so two or three at a time fit this 2-core machine.

It schedules whole modules (as `--dist loadfile` does): a module's module-scoped stacks are set up
once, on one worker, and its tests run in order. The modules of ``CLUSTER_WIDE_MODULES``
(tests/tiers.py: they change or need cluster-wide state) form one unit instead, so they run one
after the other on a single worker. The test command runs them in a pass of their own after the
side-by-side one (marker ``cluster_wide``): beside other modules, their pods competed for the
GPUs they count (seen: a multi-node test's "no free node" became "insufficient GPUs").
Every other module is isolated already: its own namespace, its own
project copy and state dir (tests/integration/conftest.py, tests/faults/conftest.py).

Why a scheduler and not `--dist loadgroup` with ``xdist_group`` marks: xdist 3.8 groups by
rewriting ``item._nodeid``, which pytest 9 no longer reads (the id lives in ``item._id``), so the
marks change nothing; ``pytest_xdist_make_scheduler`` is xdist's own hook for this.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

from xdist.scheduler import LoadScopeScheduling

from tests.tiers import CLUSTER_WIDE_MODULES

CLUSTER_WIDE = "cluster-wide"


def scope_of(nodeid: str) -> str:
    """The unit a test is scheduled with: its module, or CLUSTER_WIDE."""
    module = nodeid.split("::", 1)[0]
    return CLUSTER_WIDE if PurePosixPath(module).stem in CLUSTER_WIDE_MODULES else module


# How long each module took in a recent whole run (worker-seconds; tests/support/module_seconds.json,
# refreshed by hand from .test-durations/*.modules.txt when the suite changes much). The longest
# start first: whole modules are the unit, and a long one dealt last ran alone at the end of the
# pass (seen 2026-12-03: a 60 s module dealt last, by xdist's order of most tests first, while two
# workers idled).
MODULE_SECONDS: dict[str, float] = json.loads((Path(__file__).with_name("module_seconds.json")).read_text())["seconds"]


def weight_of(scope: str, tests: int) -> float:
    """A scope's expected seconds: its module's, the cluster-wide modules' sum, or, for a module
    not measured yet, the median module's per test times its tests."""
    if scope == CLUSTER_WIDE:
        return sum(seconds for module, seconds in MODULE_SECONDS.items()
                   if PurePosixPath(module).stem in CLUSTER_WIDE_MODULES)
    if scope in MODULE_SECONDS:
        return MODULE_SECONDS[scope]
    per_test = sorted(MODULE_SECONDS.values())[len(MODULE_SECONDS) // 2] / 4 if MODULE_SECONDS else 1.0
    return per_test * tests


def longest_first(workqueue: dict[str, dict]) -> list[tuple[str, dict]]:
    return sorted(workqueue.items(), key=lambda item: -weight_of(item[0], len(item[1])))


class ModuleScheduling(LoadScopeScheduling):
    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _assign_work_unit(self, node) -> None:
        # Before the first scope is dealt: the queue longest first (xdist filled it by test count).
        if not self._ordered:
            ordered = longest_first(self.workqueue)
            self.workqueue.clear()
            self.workqueue.update(ordered)
            self._ordered = True
        super()._assign_work_unit(node)


def pytest_xdist_make_scheduler(config, log):
    return ModuleScheduling(config, log)
