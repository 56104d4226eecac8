"""components.program.quiet_sdk_debug_log: the SDK's debug messages stop reaching the engine
(a blocking call each), unless LLM_SERVING_SDK_DEBUG_LOG is set; warnings still go through."""

from __future__ import annotations

import pulumi
import pulumi.runtime.settings as settings

from components import program


class FakeEngine:
    def __init__(self):
        self.logged = []

    def Log(self, request):  # noqa: N802 - the gRPC method's name
        self.logged.append((request.severity, request.message))


def _engine(monkeypatch) -> FakeEngine:
    engine = FakeEngine()
    monkeypatch.setattr(settings, "get_engine", lambda: engine)
    monkeypatch.setattr(pulumi.log, "debug", pulumi.log.debug)  # restored after the test
    return engine


def test_debug_messages_stop_and_warnings_still_go(monkeypatch):
    engine = _engine(monkeypatch)
    assert program.quiet_sdk_debug_log({}) is True
    pulumi.log.debug("registering resource: ty=kubernetes:apps/v1:Deployment")
    pulumi.log.warn("a warning the operator must see")
    assert [message for _severity, message in engine.logged] == ["a warning the operator must see"]


def test_the_variable_keeps_them(monkeypatch):
    engine = _engine(monkeypatch)
    assert program.quiet_sdk_debug_log({program.SDK_DEBUG_LOG: "1"}) is False
    pulumi.log.debug("registering resource")
    assert [message for _severity, message in engine.logged] == ["registering resource"]
