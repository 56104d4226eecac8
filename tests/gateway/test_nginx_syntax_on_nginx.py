"""The config renderer (nginx_syntax) on the real nginx: quoted texts come back byte for byte.

The unit tests (tests/compile/test_nginx_syntax.py) check the renderer against a reading of
nginx's tokenizer; here the shipped nginx itself reads a rendered config and answers each text.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from components.compile.gateway import nginx_syntax as syntax
from components.compile.gateway.nginx_syntax import block, d
from testkit.nginx_kit import _share, free_port, start_nginx, stop_nginx

TEXTS = {
    "json": '{"error": {"message": "it\'s a \\"quote\\"; {braces} #hash", "code": null}}\n',
    "spaces": "two  words\tand a tab",
    "backslashes": "a\\b \\n stays two characters",
    "unicode": "héllo ✓",
    "braces": "}{",
}


@pytest.fixture(scope="module")
def nginx():
    directory = Path(tempfile.mkdtemp(prefix="llm-syntax-"))
    (directory / "tmp").mkdir()
    port = free_port()
    tmp = directory / "tmp"
    conf = syntax.render([
        d("worker_processes", 1),
        d("daemon", "off"),
        d("pid", f"{tmp}/nginx.pid"),
        d("error_log", "stderr", "warn"),
        block("events", body=[d("worker_connections", 64)]),
        block("http", body=[
            [d(f"{kind}_temp_path", f"{tmp}/{kind}") for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")],
            d("access_log", "off"),
            d("default_type", "text/plain"),
            # A source value spelled like a map parameter: a value, not the default.
            block("map", "$arg_t", "$gw_seen", body=[
                syntax.map_entry("default", "the tenant named default"),
                syntax.map_entry("volatile", "the tenant named volatile"),
                d("default", "no tenant"),
            ]),
            block("server", body=[
                d("listen", f"127.0.0.1:{port}"),
                block("location", "=", "/healthz", body=[d("return", 200, "ok")]),
                block("location", "=", "/map", body=[d("return", 200, "$gw_seen")]),
                [block("location", "=", f"/{name}", body=[d("return", 200, text)]) for name, text in TEXTS.items()],
                block("location", "=", "/if", body=[
                    block("if", "$arg_t", "=", "", body=[d("return", 200, "empty")]),
                    d("return", 200, "set"),
                ]),
            ]),
        ]),
    ])
    (directory / "nginx.conf").write_text(conf)
    _share(directory)
    proc, log = start_nginx(directory, "nginx.conf", f"http://127.0.0.1:{port}/healthz", "nginx.log")
    yield f"http://127.0.0.1:{port}"
    stop_nginx(proc)
    log.close()
    shutil.rmtree(directory, ignore_errors=True)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.read().decode()


@pytest.mark.parametrize("name", TEXTS)
def test_a_rendered_text_is_answered_exactly(nginx, name):
    assert _get(f"{nginx}/{name}") == TEXTS[name]


def test_map_sources_named_like_map_parameters_are_values(nginx):
    assert _get(f"{nginx}/map?t=default") == "the tenant named default"
    assert _get(f"{nginx}/map?t=volatile") == "the tenant named volatile"
    assert _get(f"{nginx}/map?t={urllib.parse.quote('other')}") == "no tenant"


def test_an_if_condition_compares_with_the_empty_string(nginx):
    assert _get(f"{nginx}/if") == "empty"
    assert _get(f"{nginx}/if?t=x") == "set"
