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

from pathlib import PurePosixPath

from xdist.scheduler import LoadScopeScheduling

from tests.tiers import CLUSTER_WIDE_MODULES

CLUSTER_WIDE = "cluster-wide"


def scope_of(nodeid: str) -> str:
    """The unit a test is scheduled with: its module, or CLUSTER_WIDE."""
    module = nodeid.split("::", 1)[0]
    return CLUSTER_WIDE if PurePosixPath(module).stem in CLUSTER_WIDE_MODULES else module


class ModuleScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


def pytest_xdist_make_scheduler(config, log):
    return ModuleScheduling(config, log)
