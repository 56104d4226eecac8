"""A small model of nginx's configuration syntax and its one renderer.

The gateway's and the limiter's configs are built as trees of these nodes by small functions
(one per concern) and rendered here, so quoting and indentation are decided in one place: an
argument is written bare when nginx would read it back unchanged, else quoted and escaped the
way nginx's tokenizer (``ngx_conf_read_token``) reads quoted words. Comments and blank lines are
nodes too: the rendered file is read by people (``render``, the golden) and says why.

Pure: no I/O. ``$variables`` are not escaped: nginx expands them inside quotes as well, which is
what the configs want (there is no escape for a literal ``$`` in nginx, so none is offered).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Union

INDENT = "    "
# Characters that end or change an unquoted word in nginx's tokenizer (whitespace, the
# terminators, the quotes, the escape) or begin a comment at a word's start.
_SPECIAL = frozenset(" \t\r\n;{}\"'\\#")
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


@dataclass(frozen=True)
class Directive:
    name: str
    args: tuple[str, ...] = ()
    # Arguments from this index on each go on a continuation line (a long log_format).
    wrap_from: int | None = None


@dataclass(frozen=True)
class Block:
    name: str
    args: tuple[str, ...]
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Comment:
    text: str  # one line or several


@dataclass(frozen=True)
class Blank:
    pass


Node = Union[Directive, Block, Comment, Blank]
BLANK = Blank()
# What the builders accept as children: nodes, and lists of them (one concern's directives),
# and None for a part that does not apply.
Children = Iterable[Union[Node, Iterable[Node], None]]


def d(name: str, *args: object, wrap_from: int | None = None) -> Directive:
    return Directive(name, tuple(str(a) for a in args), wrap_from)


def block(name: str, *args: object, body: Children = ()) -> Block:
    return Block(name, tuple(str(a) for a in args), flatten(body))


def comment(text: str) -> Comment:
    return Comment(text)


# map's own parameters: a source value spelled like one is written with a leading backslash,
# which map strips (nginx's map docs), else `default` as a tenant's name would be the default.
MAP_PARAMETERS = frozenset({"default", "hostnames", "include", "volatile"})


def map_entry(source: str, value: object) -> Directive:
    """One line of a ``map`` block: source value -> result."""
    return d("\\" + source if source in MAP_PARAMETERS else source, value)


def flatten(body: Children) -> tuple[Node, ...]:
    out: list[Node] = []
    for item in body:
        if item is None:
            continue
        if isinstance(item, (Directive, Block, Comment, Blank)):
            out.append(item)
        else:
            out.extend(flatten(item))
    return tuple(out)


def quote(arg: str) -> str:
    """One argument as nginx reads it back: bare when it can be, else quoted and escaped."""
    if arg and not any(c in _SPECIAL for c in arg):
        return arg
    # Single quotes for text full of double quotes (JSON), else double quotes.
    q = "'" if '"' in arg and "'" not in arg else '"'
    escaped = "".join(_ESCAPES.get(c, "\\" + c if c == q else c) for c in arg)
    return f"{q}{escaped}{q}"


def _words(name: str, args: tuple[str, ...]) -> list[str]:
    words = [quote(a) for a in args]
    if name == "if":
        # `if (condition)`: nginx's `if` takes the parentheses glued to the first and last word.
        if not args or quote(args[0]) != args[0] or args[0].startswith("("):
            raise ValueError(f"an if condition starts with a bare variable, not {args[:1]!r}")
        words[0] = "(" + words[0]
        words[-1] += ")"
    return [quote(name), *words]


def _render(node: Node, depth: int, lines: list[str]) -> None:
    pad = INDENT * depth
    if isinstance(node, Blank):
        lines.append("")
    elif isinstance(node, Comment):
        lines.extend(f"{pad}# {line}".rstrip() for line in node.text.split("\n"))
    elif isinstance(node, Directive):
        words = _words(node.name, node.args)
        if node.wrap_from is None:
            lines.append(pad + " ".join(words) + ";")
        else:
            cut = node.wrap_from + 1  # the name is words[0]
            lines.append(pad + " ".join(words[:cut]))
            lines.extend(f"{pad}{INDENT}{w}" for w in words[cut:])
            lines[-1] += ";"
    else:
        words = _words(node.name, node.args)
        lines.append(pad + " ".join(words) + " {")
        for child in node.children:
            _render(child, depth + 1, lines)
        lines.append(pad + "}")


def render(nodes: Children) -> str:
    """The config file's text: one node per line (or several), four spaces per level."""
    lines: list[str] = []
    for node in flatten(nodes):
        _render(node, 0, lines)
    return "\n".join(lines) + "\n"
