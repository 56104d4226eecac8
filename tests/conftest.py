"""The tiers (tests/tiers.py: a marker per test, by folder) and the per-folder durations
(tests/durations.py) for every run; and process-wide settings a test may change, put back after each test so a later test in this
process never sees them:
- a classified failure turns tracebacks off for the dynamic-provider host's formatting
  (providers.failures; Pulumi mocks walk the stack);
- the program (`__main__.py`, run in-process by the preflight and secrets tests) silences the
  Pulumi SDK's debug log for its process (components.program.quiet_sdk_debug_log)."""

from __future__ import annotations

import pulumi.log
import pytest

from providers.failures import restore_tracebacks
from tests.durations import report_durations
from tests.tiers import mark_tiers, write_tier_files


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    mark_tiers(items)
    write_tier_files(config, items)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    report_durations(terminalreporter, config)


@pytest.fixture(autouse=True)
def full_tracebacks():
    yield
    restore_tracebacks()


@pytest.fixture(autouse=True)
def sdk_debug_log():
    debug = pulumi.log.debug
    yield
    pulumi.log.debug = debug
