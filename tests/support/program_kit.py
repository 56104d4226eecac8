"""The Pulumi program (`__main__.py`) run in this process the way `pulumi preview` runs it, for
the bad-config table (tests/program/test_program_bad_configs.py).

What the engine does for a preview, and what this does instead:
- the engine hands the language host every stack config value as a string in ``PULUMI_CONFIG``
  (objects and lists as JSON, strings as they are) and the host calls
  ``pulumi.runtime.set_all_config``: ``engine_config`` builds that map, ``set_all_config`` is called;
- the host (pulumi-language-python-exec, SDK 3.274) runs the program with
  ``runpy.run_path(program, run_name="__main__")`` inside ``run_in_stack``, and prints a
  ``pulumi.RunError`` as one error line with no traceback (any other exception as "Program failed
  with an unhandled exception" and its traceback): ``run_program`` runs the same file the same way
  under Pulumi mocks and returns the exception itself;
- the cluster and the hub are not there: every socket ``connect`` of this process is recorded and
  refused while the program runs, so "no connection" is an observation, as the traps of
  tests/faults/test_bad_input_preview.py are for the real preview.

It takes about 50 ms a case where a real preview takes ~4 s.
"""

from __future__ import annotations

import json
import runpy
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi

from tests.support.bad_configs import PROJECT

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "__main__.py"


def engine_config(sections: dict[str, Any]) -> dict[str, str]:
    """``PULUMI_CONFIG`` as the engine writes it for a stack file holding ``sections``: a string
    value as it is, anything else as JSON."""
    return {f"{PROJECT}:{key}": value if isinstance(value, str) else json.dumps(value)
            for key, value in sections.items()}


class _Mocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.declared: list[str] = []

    def new_resource(self, args):
        self.declared.append(f"{args.typ}::{args.name}")
        return [f"{args.name}-id", dict(args.inputs)]

    def call(self, args):
        return {}


@dataclass
class ProgramRun:
    error: BaseException | None  # what the program raised (None: it ran to the end)
    declared: list[str]  # resources it registered, "type::name"
    connections: list[Any] = field(default_factory=list)  # addresses it tried to connect to

    @property
    def engine_output(self) -> str:
        """What the language host prints for this outcome (the exec script's two branches)."""
        if self.error is None:
            return ""
        if isinstance(self.error, pulumi.RunError):
            return str(self.error)
        return f"Program failed with an unhandled exception:\nTraceback (most recent call last): {self.error!r}"


def run_program(sections: dict[str, Any], monkeypatch) -> ProgramRun:
    """Run ``__main__.py`` for a stack of ``sections`` as a preview would; connections refused."""
    connections: list[Any] = []

    def refuse(sock, address, *args):
        connections.append(address)
        raise ConnectionRefusedError(f"the program under test may not connect to {address!r}")

    mocks = _Mocks()
    error: BaseException | None = None
    pulumi.runtime.set_mocks(mocks, preview=True)
    pulumi.runtime.set_all_config(engine_config(sections), [])

    @pulumi.runtime.test
    def main():
        runpy.run_path(str(PROGRAM), run_name="__main__")

    with monkeypatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        try:
            main()
        except Exception as raised:  # noqa: BLE001 - the outcome under test
            error = raised
        finally:
            pulumi.runtime.set_all_config({})
    return ProgramRun(error, mocks.declared, connections)
