"""What an authenticated caller (or any caller) can send at the edge, on the real nginx + njs in
front of the stand-in router (issue 39, findings 6-8): every endpoint counted against the
tenant's rate, only the canonical paths the gateway classified forwarded (never the caller's
query or raw form), anything else a 404 OpenAI error, malformed request lines and URIs a 400
(never a 5xx), invalid UTF-8 a 400, and JSON nested as deep as vLLM accepts.
"""

from __future__ import annotations

import json
import socket
import sys
import time

import pytest

from components.compile.gateway.nginx import GatewaySettings
from components.config.gateway import GatewayConfig
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway
from tests.gateway.test_gateway_nginx import CHAT, MODEL, call, digest, error_of

TENANTS = [{"name": "lister", "rateLimit": {"requestsPerMinute": 120}}, {"name": "open"}]


@pytest.fixture(scope="module")
def fake():
    with FakeRouter(models=(MODEL,)) as router:
        yield router


@pytest.fixture(scope="module")
def gateway(fake):
    config = GatewayConfig.model_validate({"apiKeys": {"secretName": "keys", "tenants": TENANTS}})
    settings = GatewaySettings.of(config, f"127.0.0.1:{fake.port}", (MODEL,))
    keys = "".join(f"{digest('sk-' + t['name'])} {t['name']}\n" for t in TENANTS)
    with Gateway(settings, keys=keys) as gw:
        yield gw


OPEN = {"Authorization": "Bearer sk-open"}


@pytest.fixture(autouse=True)
def clean(fake):
    fake.requests.clear()
    yield


def raw_request(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Sends bytes as they are (no client normalises the path) and reads the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(head + body)
        data = b""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            chunk = client.recv(65536)
            if not chunk:
                break
            data += chunk
            if b"\r\n\r\n" in data:
                headers, _, rest = data.partition(b"\r\n\r\n")
                length = [int(line.split(b":")[1]) for line in headers.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")]
                if length and len(rest) >= length[0]:
                    break
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return status, data


def body_of(data: bytes) -> dict:
    return json.loads(data.partition(b"\r\n\r\n")[2])


# --- finding 6: every endpoint counts against the tenant's rate ----------------------------------

def test_the_model_list_counts_against_the_tenants_rate(gateway, fake):
    # 120/min with the default burst (2 a second): three pass at once, then 429s; only the
    # admitted ones reach the router.
    statuses = [call(gateway.base, "/v1/models", headers={"Authorization": "Bearer sk-lister"})[0]
                for _ in range(30)]
    assert statuses[:3] == [200] * 3 and set(statuses[3:]) == {429}, statuses
    assert len([r for r in fake.requests if r["path"] == "/v1/models"]) == 3


# --- finding 7: only canonical classified paths, without the query ---------------------------------

@pytest.mark.parametrize("stream", [True, False])
def test_the_router_gets_the_canonical_path_without_the_callers_query(gateway, fake, stream):
    status, _, _ = call(gateway.base, "/v1/chat/completions?api-version=1&x=%2F..", {**CHAT, "stream": stream}, OPEN)
    assert status == 200
    assert [r["path"] for r in fake.requests if r["method"] == "POST"] == ["/v1/chat/completions"]
    status, _, _ = call(gateway.base, "/v1/embeddings?q=1", {"model": MODEL, "input": "x"}, OPEN)
    assert status == 200 and fake.requests[-1]["path"] == "/v1/embeddings"


@pytest.mark.parametrize("path", [
    b"/v1//chat/completions", b"/v1/chat/completions/..%2F..%2Fembeddings", b"/v1/chat/completions/",
    b"/v1/./chat/completions", b"/v1/chat%2Fcompletions", b"/v1/embeddings/../chat/completions",
    b"/V1/chat/completions",
])
def test_a_non_canonical_path_is_a_404_and_reaches_nothing(gateway, fake, path):
    body = json.dumps({**CHAT, "stream": True}).encode()
    status, data = raw_request(gateway.port, b"POST " + path + b" HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-open"
                               b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                               % len(body), body)
    assert status == 404, data[:300]
    assert error_of(data.partition(b"\r\n\r\n")[2].decode())["code"] == "unsupported_endpoint"
    assert not fake.requests


# --- finding 8: malformed input is a 400, never a 5xx ---------------------------------------------

@pytest.mark.parametrize("line", [b"GET /%zz HTTP/1.1", b"GET /../v1/models HTTP/1.1", b"GET /v1/%2 HTTP/1.1",
                                  b"POST /v1/../../x HTTP/1.1", b"GET v1/models HTTP/1.1",
                                  b"GET /v1/models HTTP/9.9", b"\x16\x03\x01 junk"])
def test_malformed_request_lines_and_uris_get_a_400_openai_error(gateway, fake, line):
    status, data = raw_request(gateway.port, line + b"\r\nHost: gw\r\nConnection: close\r\n\r\n")
    assert status == 400 or (status == 0 and data == b""), data[:300]
    if status:
        error = body_of(data)["error"]
        assert error["code"] == "bad_request" and error["type"] == "invalid_request_error"
    assert not fake.requests


def test_a_body_with_invalid_utf8_is_a_400(gateway, fake):
    for stream in (True, False):
        raw = b'{"model": "qwen-small", "stream": %s, "messages": [{"role": "user", "content": "caf\xe9 \xff"}]}' % (
            b"true" if stream else b"false")
        status, _, text = call(gateway.base, "/v1/chat/completions", raw=raw, headers=OPEN)
        assert status == 400 and error_of(text)["code"] == "invalid_json" and "UTF-8" in error_of(text)["message"]
    # Valid multi-byte text passes byte for byte.
    raw = '{"model": "qwen-small", "stream": true, "messages": [{"role": "user", "content": "café ☕ 𝄞"}]}'.encode()
    status, _, _ = call(gateway.base, "/v1/chat/completions", raw=raw, headers=OPEN)
    assert status == 200 and fake.requests[-1]["body"].encode() == raw


# vLLM parses a request body with Python's json (FastAPI's request.json()), whose C scanner stops
# at the interpreter's C recursion limit: 1,497 nested containers on Python 3.12 (vLLM's images),
# 994 on 3.11 (measured 2026-12-07); the gateway accepts what 3.12 does.
JSON_MAX_DEPTH = 1497


def depth_of(value) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


@pytest.fixture
def deep_python():
    """The stand-in router and this test decode and encode JSON deeper than Python 3.11's default
    recursion limit allows (its C scanner counts against it)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    yield
    sys.setrecursionlimit(before)


@pytest.mark.parametrize("stream", [True, False])
def test_json_nested_as_deep_as_vllm_accepts_passes_and_deeper_is_a_400(gateway, fake, stream, deep_python):
    body = {**CHAT, "stream": stream, "response_format": {"type": "json_schema", "json_schema": {"name": "deep"}}}
    # The schema's nesting brings the body to exactly JSON_MAX_DEPTH (body, response_format and
    # json_schema are three levels).
    inner = JSON_MAX_DEPTH - 3
    body["response_format"]["json_schema"]["schema"] = json.loads("[" * inner + "]" * inner)
    assert depth_of(body) == JSON_MAX_DEPTH
    status, _, text = call(gateway.base, "/v1/chat/completions", raw=json.dumps(body).encode(), headers=OPEN)
    assert status == 200, text
    sent = fake.requests[-1]["body"]
    assert json.loads(sent)["response_format"] == body["response_format"]
    deeper = json.dumps(body).replace('"schema": [', '"schema": [[', 1).replace("]}}", "]]}}", 1)
    assert depth_of(json.loads(deeper)) == JSON_MAX_DEPTH + 1
    status, _, text = call(gateway.base, "/v1/chat/completions", raw=deeper.encode(), headers=OPEN)
    assert status == 400 and error_of(text)["code"] == "invalid_json" and str(JSON_MAX_DEPTH) in text
