"""Tests call provider methods in-process: a classified failure turns tracebacks off for
the dynamic-provider host's formatting (providers.failures). Put them back after each test, so a
later test in this process (Pulumi mocks walk the stack) never sees the limit."""

from __future__ import annotations

import pytest

from providers.failures import restore_tracebacks


@pytest.fixture(autouse=True)
def full_tracebacks():
    yield
    restore_tracebacks()
