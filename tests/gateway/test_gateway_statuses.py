"""Every status a caller can get is decided in one place (components/compile/gateway/statuses.py):
the docs' errors table is that table, every error code the script or the rendered nginx.conf
answers with is one of it, with its status and type, and none of it is unused.

Pure: the script's source and the rendered files, no nginx (the answers themselves are checked
on nginx by the other tests of this directory).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from components.compile.gateway import nginx as gw
from components.compile.gateway.nginx import GatewaySettings, Tenant, render_files
from components.compile.gateway.statuses import ANSWERS, BY_CODE, markdown_table

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = [Path(gw.__file__).parent / name for name in (gw.SCRIPT, *gw.MODULES)]

# A render with every optional part on: keys and limited tenants, TLS, holds, a next revision.
RICH = GatewaySettings(upstream="127.0.0.1:1", models=("m",), limiter="127.0.0.1:2", keys_file="/k",
                       tenants=(Tenant("a", None, None, 60, 1, 1000),), tls_dir="/tls", hold_timeout_seconds=30,
                       splits=(("m", "m-next", 10),))


def test_the_docs_errors_table_is_the_registry():
    doc = (REPO / "docs" / "gateway.md").read_text()
    assert markdown_table() in doc, ("docs/gateway.md's errors table differs from statuses.py; replace it with:\n"
                                     + markdown_table())


def script_codes() -> set[str]:
    text = "\n".join(path.read_text() for path in SCRIPTS)
    return set(re.findall(r"refuse\(r, '(\w+)'", text)) | set(re.findall(r"cfg\.answers\[\s*'(\w+)'", text)) | set(
        re.findall(r"code: '(\w+)'", text))


def conf_answers(conf: str) -> list[tuple[int, dict]]:
    """(status, error object) of every `return <status> '<json>'` and map value of the config."""
    found = []
    for status, body in re.findall(r"return (\d{3}) '(\{\"error\".*?)\\n';", conf):
        found.append((int(status), json.loads(body)["error"]))
    for body in re.findall(r"'(\{\"error\".*?)(?:\\n)?';", conf):
        found.append((0, json.loads(body)["error"]))
    return found


def test_every_code_answered_is_in_the_registry_with_its_status_and_type():
    codes = script_codes()
    assert codes <= set(BY_CODE), codes - set(BY_CODE)
    for keys in (True, False):
        conf = render_files(RICH if keys else GatewaySettings(upstream="127.0.0.1:1", models=("m",)))["nginx.conf"]
        for status, error in conf_answers(conf):
            answer = BY_CODE[error["code"]]
            assert error["type"] == answer.type, error
            assert status in (0, answer.status), (status, error)
    settings = json.loads(render_files(RICH)["gateway_config.js"].split("export default ", 1)[1].rstrip(";\n"))
    assert settings["answers"] == {a.code: {"status": a.status, "type": a.type} for a in ANSWERS}


def test_no_answer_of_the_registry_is_unused():
    conf = render_files(RICH)["nginx.conf"]
    used = script_codes() | {error["code"] for _, error in conf_answers(conf)}
    assert set(BY_CODE) <= used, set(BY_CODE) - used
