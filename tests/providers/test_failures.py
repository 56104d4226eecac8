"""Classified failures reach the person running `pulumi up` without the host's frames in front;
any other exception keeps its traceback."""

from __future__ import annotations

import sys
import time
import traceback

from providers import failures
from providers.crd_check import CrdsMissing
from providers.failures import Reported, reported
from providers.gate import WeightsNotReady
from providers.kube import ClusterUnreachable
from providers.nim_status import NimModelNotServing, NimOperatorMissing
from providers.status import ModelNotServing


class Provider:
    @reported
    def create(self, error: Exception):
        raise error


def host_output(error: Exception) -> str:
    """What the dynamic-provider host sends the engine: ``traceback.format_exc()``."""
    try:
        Provider().create(error)
    except Exception:  # noqa: BLE001
        return traceback.format_exc()
    raise AssertionError("create did not raise")


def test_a_reported_failure_is_printed_as_its_message_alone():
    text = host_output(ModelNotServing("model tiny is ERROR: crash loop\nreason: crash-loop"))
    assert text == "providers.status.ModelNotServing: model tiny is ERROR: crash loop\nreason: crash-loop\n"


def test_any_other_exception_keeps_its_frames_even_after_a_reported_one():
    host_output(ModelNotServing("first"))
    text = host_output(KeyError("a bug"))
    assert text.startswith("Traceback (most recent call last):") and "in create" in text


def test_every_user_facing_failure_is_reported():
    for cls in (ModelNotServing, NimModelNotServing, NimOperatorMissing, CrdsMissing, WeightsNotReady, ClusterUnreachable):
        assert issubclass(cls, Reported), cls


def test_full_tracebacks_come_back_by_themselves(monkeypatch):
    """The limit is for the host's formatting of this one failure: other code in the process
    (the Pulumi SDK walks the stack to register resources) must not keep seeing it."""
    monkeypatch.setattr(failures, "RESTORE_AFTER_SECONDS", 0.05)
    host_output(ModelNotServing("first"))
    assert getattr(sys, "tracebacklimit", None) == 0
    deadline = time.monotonic() + 5
    while hasattr(sys, "tracebacklimit") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not hasattr(sys, "tracebacklimit")
    assert traceback.extract_stack()  # what pulumi's resource registration relies on
