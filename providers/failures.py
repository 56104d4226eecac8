"""Failures whose message is the whole story for the person running `pulumi up`.

The dynamic-provider host answers a raised exception with ``traceback.format_exc()``, so the
engine prints a dozen lines of host and provider frames before the reason, the evidence and the
fix. For these failures the frames are noise (the message was composed to be read), so
``reported`` prints none: it sets ``sys.tracebacklimit = 0`` for the host's formatting of this
exception, which happens as soon as the call returns, and puts the default back one second
later (and at the start of the next decorated call). A genuine bug (any other exception) keeps
its full traceback, unless it is formatted within that second.

No import-time side effects: this module is imported by pickled providers.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


class Reported(Exception):
    """A classified failure: its message names what happened, the evidence and what to do."""


RESTORE_AFTER_SECONDS = 1.0


def restore_tracebacks() -> None:
    """Back to full tracebacks, if a report left them off."""
    if getattr(sys, "tracebacklimit", None) == 0:
        del sys.tracebacklimit


def reported(method: F) -> F:
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        restore_tracebacks()
        try:
            return method(*args, **kwargs)
        except Reported:
            sys.tracebacklimit = 0
            timer = threading.Timer(RESTORE_AFTER_SECONDS, restore_tracebacks)
            timer.daemon = True
            timer.start()
            raise
    return wrapper  # type: ignore[return-value]
