"""Parse Python source for the tests that read code with ``ast`` (hygiene, architecture, imports).

CPython 3.11 can raise ``SystemError: AST constructor recursion depth mismatch`` from a correct
``ast.parse`` when another thread of the same process builds an AST at the same moment
(python/cpython#106905; 3.11's traceback formatting calls ``ast.parse`` for its carets, so a
server thread logging an exception is enough). The parse is pure, so trying it again is exact;
any other error, and this one three times running, is raised as it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

RACE = "AST constructor recursion depth mismatch"
ATTEMPTS = 3


def parse_text(source: str, filename: str = "<unknown>") -> ast.Module:
    for attempt in range(ATTEMPTS):
        try:
            return ast.parse(source, filename=filename)
        except SystemError as error:
            if RACE not in str(error) or attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def parse_file(path: Path) -> ast.Module:
    return parse_text(path.read_text(), filename=str(path))
