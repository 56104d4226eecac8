"""The nginx config renderer: what it writes, nginx's tokenizer reads back unchanged.

``read_back`` follows nginx's ``ngx_conf_read_token`` (src/core/ngx_conf_file.c): words split at
whitespace, ``;`` and ``{``; a quote opens a quoted word only at a word's start and must be
followed by whitespace, ``;``, ``{`` or ``)``; ``#`` starts a comment only at a word's start;
``\\"``, ``\\'`` and ``\\\\`` unescape to the character and ``\\n``, ``\\t``, ``\\r`` to the control
character, other backslashes stay. The real nginx reads the rendered configs too (tests/gateway
runs every rendered nginx.conf; test_gateway_nginx.py answers a quoted text back).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.compile.gateway import nginx_syntax as syntax
from components.compile.gateway.nginx_syntax import BLANK, block, comment, d, quote, render


def _unescape(raw: str) -> str:
    out, i = [], 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            if nxt in "\"'\\":
                out.append(nxt)
                i += 2
                continue
            if nxt in "ntr":
                out.append({"n": "\n", "t": "\t", "r": "\r"}[nxt])
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


def read_back(text: str) -> list:
    """nginx's view of a config: [(words, children or None)], comments and blank lines gone."""
    pos, n = 0, len(text)

    def word() -> tuple[str, str]:
        nonlocal pos
        c = text[pos]
        if c in "\"'":
            end = pos + 1
            while text[end] != c:
                end += 2 if text[end] == "\\" else 1
            raw, pos = text[pos + 1:end], end + 1
            if pos < n and text[pos] not in " \t\r\n;{)":
                raise ValueError(f"unexpected {text[pos]!r} after a quoted word at {pos}")
            return "q", _unescape(raw)
        start, variable = pos, False
        while pos < n:
            c = text[pos]
            if c == "{" and variable:
                pos += 1
                continue
            variable = False
            if c == "\\":
                pos += 2
                continue
            if c == "$":
                variable = True
            elif c in " \t\r\n;{":
                break
            pos += 1
        return "b", _unescape(text[start:pos])

    def items(depth: int) -> list:
        nonlocal pos
        out, words = [], []
        while True:
            while pos < n and text[pos] in " \t\r\n":
                pos += 1
            if pos >= n:
                if words or depth:
                    raise ValueError("unexpected end of file")
                return out
            c = text[pos]
            if c == "#" and not words or c == "#" and text[pos - 1] in " \t\r\n":
                pos = text.index("\n", pos) if "\n" in text[pos:] else n
            elif c == ";":
                pos += 1
                out.append((tuple(words), None))
                words = []
            elif c == "{":
                pos += 1
                out.append((tuple(words), items(depth + 1)))
                words = []
            elif c == "}" and not words:
                pos += 1
                if not depth:
                    raise ValueError("unexpected }")
                return out
            elif c == ")" and words:
                # `if (... "")`: nginx starts a new word at a `)` right after a quoted one.
                _, w = word()
                words.append(w)
            else:
                _, w = word()
                words.append(w)

    return items(0)


def test_plain_words_are_bare_and_variables_stay_variables():
    assert render([d("proxy_set_header", "x-model", "$gw_model")]) == "proxy_set_header x-model $gw_model;\n"
    assert quote("http://gw_router/v1/models") == "http://gw_router/v1/models"
    assert quote("zone=gw_address:1m") == "zone=gw_address:1m"


@pytest.mark.parametrize("arg, written", [
    ("", '""'),
    ("two words", '"two words"'),
    ("a;b", '"a;b"'),
    ("{1,128}", '"{1,128}"'),
    ("a}b", '"a}b"'),
    ("#no-comment", '"#no-comment"'),
    ('{"status":"ok"}\n', "'{\"status\":\"ok\"}\\n'"),
    ("it's", '"it\'s"'),
    ("both ' and \"", '"both \' and \\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("tab\there", '"tab\\there"'),
    ("$gw_limited_body\n", '"$gw_limited_body\\n"'),
])
def test_arguments_that_nginx_would_split_or_change_are_quoted(arg, written):
    assert quote(arg) == written
    assert read_back(render([d("return", 200, arg)])) == [(("return", "200", arg), None)]


def test_blocks_nest_four_spaces_a_level_with_comments_and_blank_lines():
    text = render([
        comment("top"),
        block("http", body=[
            d("server_tokens", "off"),
            BLANK,
            comment("why, over\ntwo lines"),
            block("server", body=[block("location", "=", "/x", body=[d("return", 204)])]),
        ]),
    ])
    assert text == ("# top\n"
                    "http {\n"
                    "    server_tokens off;\n"
                    "\n"
                    "    # why, over\n"
                    "    # two lines\n"
                    "    server {\n"
                    "        location = /x {\n"
                    "            return 204;\n"
                    "        }\n"
                    "    }\n"
                    "}\n")


def test_if_conditions_take_their_parentheses_and_an_empty_string_compares():
    text = render([block("if", "$gw_tenant", "=", "", body=[d("return", 401)])])
    assert text == 'if ($gw_tenant = "") {\n    return 401;\n}\n'
    assert read_back(text) == [(("if", "($gw_tenant", "=", "", ")"), [(("return", "401"), None)])]
    with pytest.raises(ValueError, match="bare variable"):
        render([block("if", "a b", "=", "", body=[])])


def test_long_directives_wrap_one_argument_a_line():
    text = render([block("http", body=[d("log_format", "gw", "escape=json", "'a'", "b c", wrap_from=2)])])
    assert text == "http {\n    log_format gw escape=json\n        \"'a'\"\n        \"b c\";\n}\n"
    assert read_back(text) == [(("http",), [(("log_format", "gw", "escape=json", "'a'", "b c"), None)])]


def test_map_sources_spelled_like_map_parameters_are_escaped():
    # nginx strips the backslash: a tenant named `default` is a tenant, not the default.
    assert render([syntax.map_entry("default", "1")]) == '"\\\\default" 1;\n'
    assert read_back(render([syntax.map_entry("default", "1")])) == [(("\\default", "1"), None)]
    assert render([syntax.map_entry("team-a", "1")]) == "team-a 1;\n"


def test_none_and_nested_lists_are_flattened_in_order():
    assert render([[d("a"), None, [d("b")]], d("c")]) == "a;\nb;\nc;\n"


# Words mixing what nginx's tokenizer treats specially with plain characters and non-ASCII.
_words = st.text(st.sampled_from(" \t\r\n;{}\"'\\#$()=~^a1_-/.:é"), max_size=10)
_names = st.sampled_from(["location", "server", "proxy_set_header", "map", "x", "a_1"])


_directives = st.builds(lambda name, args: d(name, *args), _names, st.lists(_words, max_size=4))
_trees = st.recursive(_directives, lambda children: st.builds(
    lambda name, args, body: block(name, *args, body=body), _names, st.lists(_words, max_size=3),
    st.lists(children, max_size=4)), max_leaves=12)


def _expected(nodes) -> list:
    return [((n.name, *n.args), _expected(n.children) if isinstance(n, syntax.Block) else None)
            for n in syntax.flatten(nodes) if isinstance(n, (syntax.Directive, syntax.Block))]


@settings(max_examples=100, deadline=None)
@given(st.lists(_trees, max_size=4))
def test_any_tree_reads_back_as_itself(nodes):
    assert read_back(render(nodes)) == _expected(nodes)
