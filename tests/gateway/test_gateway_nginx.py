"""The rendered gateway on a real nginx + njs (1.26.3 with njs 0.8.9, the image's, unpacked when
missing) in front of a stand-in router that enforces the router's contract (fake_router.py):
what clients get, what reaches the router, and the errors.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import socket
import time
import urllib.error
import urllib.request

import pytest

from components.compile.gateway.nginx import GatewaySettings, Tenant
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway, free_port

MODEL = "qwen-small"
CHAT = {"model": MODEL, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]}


def call(base, path, body=None, headers=None, method=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=20) as reply:
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()


def last(fake: FakeRouter) -> dict:
    return fake.requests[-1]


@pytest.fixture(scope="module")
def fake():
    with FakeRouter(models=(MODEL, "other")) as router:
        yield router


@pytest.fixture(scope="module")
def gateway(fake):
    settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL, "other"), max_body_bytes=64 * 1024)
    with Gateway(settings) as gw:
        yield gw


@pytest.fixture(autouse=True)
def clean(fake):
    fake.requests.clear()
    fake.disconnects.clear()
    fake.status_override.clear()
    fake.delay = 0.0
    yield


# --- answers ---------------------------------------------------------------------------------

def test_non_streaming_chat_is_sent_as_a_stream_and_answered_as_one_vllm_shaped_object(gateway, fake):
    status, headers, text = call(gateway.base, "/v1/chat/completions", CHAT)
    assert status == 200 and headers["content-type"] == "application/json"
    answer = json.loads(text)
    assert list(answer) == ["id", "object", "created", "model", "choices", "service_tier", "system_fingerprint",
                            "usage", "prompt_logprobs", "prompt_token_ids", "kv_transfer_params"]
    assert answer["object"] == "chat.completion" and answer["id"] == "chatcmpl-fake"
    choice = answer["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "Hello from the fake engine"
    assert "tool_calls" not in choice["message"]  # none called: left out, as OpenAI and vLLM after 0.11
    assert choice["finish_reason"] == "stop"
    assert answer["usage"] == {"prompt_tokens": 7, "total_tokens": 12, "completion_tokens": 5}
    sent = json.loads(last(fake)["body"])
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == CHAT["messages"]


def test_streaming_chat_passes_through_unchanged_and_unbuffered(gateway, fake):
    fake.delay = 0.15
    body = json.dumps({**CHAT, "stream": True}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=20)
    start = time.monotonic()
    connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    reply = connection.getresponse()
    first = reply.read1(65536)
    first_at = time.monotonic() - start
    rest = reply.read()
    total = time.monotonic() - start
    assert reply.status == 200 and reply.getheader("content-type") == "text/event-stream"
    assert first.startswith(b"data: ")
    # Seven events 0.15 s apart: the first reaches the client long before the last is written.
    assert first_at < 0.5 < total, (first_at, total)
    assert last(fake)["body"] == body.decode()  # byte for byte
    assert rest.rstrip().endswith(b"data: [DONE]")


def test_tool_call_deltas_are_joined(gateway, fake):
    # The fold itself, on a stream of tool-call deltas as vLLM sends them.
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]},
                      "finish_reason": "tool_calls"}]},
    ]
    fake.custom_chat = [dict(e, id="chatcmpl-t", object="chat.completion.chunk", created=1, model=MODEL) for e in events]
    try:
        status, _, text = call(gateway.base, "/v1/chat/completions", CHAT)
    finally:
        fake.custom_chat = None
    message = json.loads(text)["choices"][0]
    assert status == 200 and message["finish_reason"] == "tool_calls"
    assert message["message"]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]


def test_non_streaming_responses_answer_is_the_completed_response(gateway, fake):
    status, _, text = call(gateway.base, "/v1/responses", {"model": MODEL, "input": "Hi"})
    answer = json.loads(text)
    assert status == 200 and answer["object"] == "response" and answer["status"] == "completed"
    assert answer["output"][0]["content"][0]["text"] == "Hello from the fake engine"
    assert answer["usage"]["output_tokens"] == 5
    sent = json.loads(last(fake)["body"])
    assert sent["stream"] is True and "stream_options" not in sent


def test_streaming_responses_pass_through(gateway, fake):
    status, headers, text = call(gateway.base, "/v1/responses", {"model": MODEL, "input": "Hi", "stream": True})
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert "event: response.completed" in text


def test_embeddings_go_through_as_they_are(gateway, fake):
    raw = b'{"model": "qwen-small",   "input": ["a", "b"]}'
    status, _, text = call(gateway.base, "/v1/embeddings", raw=raw)
    assert status == 200 and json.loads(text)["data"][0]["object"] == "embedding"
    assert last(fake)["body"] == raw.decode()
    seen = last(fake)["headers"]
    assert seen["x-input-tokens"] == "1" and len(seen["x-cache-affinity-key"]) == 32
    call(gateway.base, "/v1/embeddings", {"model": MODEL, "input": [[1, 2, 3], [4, 5]]})
    assert last(fake)["headers"]["x-input-tokens"] == "5"  # token ids count one each


def test_model_list_is_openais_list(gateway, fake):
    status, _, text = call(gateway.base, "/v1/models")
    listing = json.loads(text)
    assert status == 200 and listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == [MODEL, "other"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) and m["owned_by"] for m in listing["data"])


# --- headers ---------------------------------------------------------------------------------

def test_contract_headers_reach_the_router(gateway, fake):
    status, headers, _ = call(gateway.base, "/v1/chat/completions", CHAT, {"x-request-id": "client-id-1"})
    seen = last(fake)["headers"]
    assert status == 200
    # The router gets the gateway's own id; the caller's comes back in a header of its own.
    assert seen["x-request-id"] == headers["x-request-id"] != "client-id-1"
    assert headers["x-client-request-id"] == "client-id-1"
    assert seen["x-model"] == MODEL
    # ceil(characters / 4) + 4 per message: "Be brief." + "Hi there" = 17 characters, 2 messages.
    assert seen["x-input-tokens"] == str(-(-17 // 4) + 2 * 4)
    assert seen["x-stargate-max-wait-ms"] == "600000"
    assert seen["content-type"] == "application/json"


def test_the_router_always_gets_the_gateways_own_request_id(gateway, fake):
    for sent in ({}, {"x-request-id": "req-1"}, {"x-request-id": "has spaces and ünïcode"},
                 {"x-request-id": "x" * 129}):
        _, headers, _ = call(gateway.base, "/v1/chat/completions", CHAT, sent)
        generated = last(fake)["headers"]["x-request-id"]
        assert len(generated) == 32 and all(c in "0123456789abcdef" for c in generated), generated
        assert headers["x-request-id"] == generated
        # Only a plain token is echoed back for correlation.
        assert headers.get("x-client-request-id") == (sent["x-request-id"] if sent.get("x-request-id") == "req-1"
                                                      else None)


def test_the_clients_deadline_bounds_the_routers_wait(gateway, fake):
    call(gateway.base, "/v1/chat/completions", CHAT, {"x-stainless-read-timeout": "12.5"})
    assert last(fake)["headers"]["x-stargate-max-wait-ms"] == "12500"
    call(gateway.base, "/v1/chat/completions", CHAT, {"x-stainless-read-timeout": "99999"})
    assert last(fake)["headers"]["x-stargate-max-wait-ms"] == "600000"


def test_caller_supplied_trusted_and_internal_headers_never_reach_the_router(gateway, fake):
    forged = {"x-routing-key": "someone-else", "x-priority": "0", "x-cache-affinity-key": "forged",
              "x-model": "other", "x-input-tokens": "1", "x-stargate-max-wait-ms": "1",
              "x-stargate-expected-queue-ms": "1", "x-routing-method": "random", "x-request-slo-ms": "1",
              "x-max-wait-ms": "1", "x-dynamo-request-priority": "9", "Authorization": "Bearer sk-x",
              "x-forwarded-for": "1.2.3.4", "cookie": "a=b"}
    call(gateway.base, "/v1/chat/completions", CHAT, forged)
    seen = last(fake)["headers"]
    assert seen["x-model"] == MODEL and seen["x-cache-affinity-key"] != "forged"
    assert seen["x-input-tokens"] != "1" and seen["x-stargate-max-wait-ms"] != "1"
    for name in ("x-routing-key", "x-priority", "x-stargate-expected-queue-ms", "x-routing-method",
                 "x-request-slo-ms", "x-max-wait-ms", "x-dynamo-request-priority", "authorization",
                 "x-forwarded-for", "cookie"):
        assert name not in seen, name


@pytest.mark.parametrize("stream", [False, True])
def test_the_routers_internal_response_headers_are_hidden(gateway, stream):
    _, headers, _ = call(gateway.base, "/v1/chat/completions", {**CHAT, "stream": stream})
    for name in ("x-inference-server-id", "x-inference-server-url", "x-stargate-cluster-id"):
        assert name not in headers, name
    assert headers["x-request-id"] != "router-side-id"


# --- affinity --------------------------------------------------------------------------------

def affinity(gateway, fake, body, headers=None) -> str:
    call(gateway.base, "/v1/chat/completions", body, headers)
    return last(fake)["headers"].get("x-cache-affinity-key", "")


def test_every_turn_of_a_conversation_carries_one_affinity_key(gateway, fake):
    turn1 = CHAT
    turn2 = {**CHAT, "messages": CHAT["messages"] + [{"role": "assistant", "content": "Hello!"},
                                                      {"role": "user", "content": "Tell me more"}]}
    other = {**CHAT, "messages": [CHAT["messages"][0], {"role": "user", "content": "Another topic"}]}
    key = affinity(gateway, fake, turn1)
    assert len(key) == 32
    assert affinity(gateway, fake, turn2) == key
    assert affinity(gateway, fake, other) != key
    assert affinity(gateway, fake, {**turn1, "model": "other"}) != key


def test_session_header_only_when_the_platform_allows_it(fake):
    settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL,), session_header="x-session-id")
    with Gateway(settings) as gw:
        one = affinity(gw, fake, CHAT, {"x-session-id": "s-1"})
        assert "x-session-id" not in last(fake)["headers"]  # hashed, never forwarded
        assert affinity(gw, fake, {**CHAT, "messages": [{"role": "user", "content": "other"}]}, {"x-session-id": "s-1"}) == one
        assert affinity(gw, fake, CHAT, {"x-session-id": "s-2"}) != one
        assert affinity(gw, fake, CHAT) not in ("", one)  # without it: the prefix hash


def test_no_affinity_key_when_off(fake):
    settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL,), affinity=False)
    with Gateway(settings) as gw:
        assert affinity(gw, fake, CHAT) == ""


# --- errors ----------------------------------------------------------------------------------

def error_of(text: str) -> dict:
    body = json.loads(text)
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


@pytest.mark.parametrize("raw, code", [
    (b"{not json", "invalid_json"), (b"[1, 2]", "invalid_json"), (b"", "invalid_json"),
    (b'{"messages": []}', "missing_model"), (b'{"model": "", "messages": []}', "missing_model"),
    (b'{"model": "qwen-small", "stream": "yes"}', "invalid_value"),
])
def test_bad_bodies_get_400(gateway, fake, raw, code):
    status, headers, text = call(gateway.base, "/v1/chat/completions", raw=raw)
    assert status == 400 and error_of(text)["code"] == code and headers["x-request-id"]
    assert not fake.requests


def test_unknown_model_gets_404(gateway, fake):
    status, _, text = call(gateway.base, "/v1/chat/completions", {**CHAT, "model": "gpt-4"})
    assert status == 404 and error_of(text)["code"] == "model_not_found" and not fake.requests


def test_too_large_body_gets_413(gateway, fake):
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 70 * 1024}]}
    status, _, text = call(gateway.base, "/v1/chat/completions", big)
    assert status == 413 and error_of(text)["code"] == "request_too_large" and not fake.requests


def test_legacy_completions_names_the_supported_endpoints(gateway, fake):
    status, _, text = call(gateway.base, "/v1/completions", {"model": MODEL, "prompt": "x"})
    error = error_of(text)
    assert status == 404 and error["code"] == "unsupported_endpoint"
    for endpoint in ("/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/models"):
        assert endpoint in error["message"]


def test_wrong_method_gets_405(gateway):
    status, headers, text = call(gateway.base, "/v1/chat/completions", method="GET")
    assert status == 405 and headers["allow"] == "POST" and error_of(text)["code"] == "method_not_allowed"


@pytest.mark.parametrize("stream", [False, True])
def test_no_target_gets_503_with_retry_after(gateway, fake, stream):
    fake.models.remove("other")
    try:
        status, headers, text = call(gateway.base, "/v1/chat/completions", {**CHAT, "model": "other", "stream": stream})
    finally:
        fake.models.append("other")
    assert status == 503 and headers["retry-after"] == "2" and error_of(text)["type"] == "service_unavailable"
    assert len(fake.requests) == 1  # no retry


def test_engine_errors_pass_through(gateway, fake):
    fake.status_override["/v1/chat/completions"] = 400
    status, _, text = call(gateway.base, "/v1/chat/completions", CHAT)
    assert status == 400 and error_of(text)["message"] == "engine says no"


def test_router_down_gets_503_with_retry_after(fake):
    settings = GatewaySettings(upstream=f"127.0.0.1:{free_port()}", models=(MODEL,), retry_after_seconds=7)
    with Gateway(settings) as gw:
        for path, body in (("/v1/chat/completions", CHAT), ("/v1/chat/completions", {**CHAT, "stream": True}),
                           ("/v1/embeddings", {"model": MODEL, "input": "x"}), ("/v1/models", None)):
            status, headers, text = call(gw.base, path, body)
            assert status == 503 and headers["retry-after"] == "7", path
            assert error_of(text)["type"] == "service_unavailable"


# --- client disconnect -----------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_disconnects_cancels_the_upstream_request(gateway, fake, stream):
    fake.delay = 0.3
    body = json.dumps({**CHAT, "stream": stream}).encode()
    with socket.create_connection(("127.0.0.1", gateway.port)) as client:
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                       b"x-request-id: leaving-early\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 5
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.02)
    # Seven events take 2.1 s; the router sees the connection close long before the end.
    deadline = time.monotonic() + 4
    while not fake.disconnects and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(fake.disconnects) == 1 and fake.disconnects == [r["headers"]["x-request-id"] for r in fake.requests]


# --- API keys and tenants ------------------------------------------------------------------------

def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def keyed(fake):
    tenants = (Tenant("team-a", "route-a", None, None, 0),
               Tenant("team-b", None, ("other",), None, 0),
               Tenant("team-c", None, None, 2, 0))
    settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL, "other"),
                               keys_file="keys", tenants=tenants, max_body_bytes=64 * 1024)
    keys = (f"{digest('sk-a')} team-a\n{digest('sk-b')} team-b\n{digest('sk-c')} team-c\n"
            f"{digest('sk-x')} not-a-tenant\n")
    with Gateway(settings, keys=keys) as gw:
        yield gw


def test_keys_are_required_and_checked(keyed, fake):
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": "Bearer sk-x"},
                    {"Authorization": "Basic c2stYQ=="}):
        status, response_headers, text = call(keyed.base, "/v1/chat/completions", CHAT, headers)
        assert status == 401 and error_of(text)["code"] == "invalid_api_key", headers
        assert response_headers["www-authenticate"] == "Bearer"
    status, _, _ = call(keyed.base, "/v1/models")
    assert status == 401 and not fake.requests


def test_a_tenant_gets_its_routing_key(keyed, fake):
    status, _, _ = call(keyed.base, "/v1/chat/completions", CHAT, {"Authorization": "Bearer sk-a"})
    assert status == 200 and last(fake)["headers"]["x-routing-key"] == "route-a"
    assert "authorization" not in last(fake)["headers"]


def test_a_tenant_sees_and_calls_only_its_models(keyed, fake):
    auth = {"Authorization": "Bearer sk-b"}
    status, _, text = call(keyed.base, "/v1/chat/completions", CHAT, auth)
    assert status == 404 and error_of(text)["code"] == "model_not_found"
    _, _, text = call(keyed.base, "/v1/models", headers=auth)
    assert [m["id"] for m in json.loads(text)["data"]] == ["other"]
    status, _, _ = call(keyed.base, "/v1/chat/completions", {**CHAT, "model": "other"}, auth)
    assert status == 200 and "x-routing-key" not in last(fake)["headers"]


def test_two_tenants_with_one_request_id_reach_the_router_as_two(keyed, fake):
    # pylon keys its admission table on x-request-id: a shared id would corrupt its accounting.
    for key in ("sk-a", "sk-b"):
        body = {**CHAT, "model": MODEL if key == "sk-a" else "other"}
        status, headers, _ = call(keyed.base, "/v1/chat/completions", body,
                                  {"Authorization": f"Bearer {key}", "x-request-id": "req-1"})
        assert status == 200 and headers["x-client-request-id"] == "req-1"
    ids = [r["headers"]["x-request-id"] for r in fake.requests]
    assert len(ids) == 2 and len(set(ids)) == 2 and "req-1" not in ids


@pytest.mark.parametrize("name", ["constructor", "__proto__", "toString", "hasOwnProperty"])
def test_a_key_line_naming_an_object_member_is_no_tenant(keyed, fake, name):
    original = (keyed.dir / "keys").read_text()
    keyed.write_keys(original + f"{digest('sk-proto')} {name}\n")
    try:
        status, _, text = call(keyed.base, "/v1/chat/completions", CHAT, {"Authorization": "Bearer sk-proto"})
    finally:
        keyed.write_keys(original)
    assert status == 401 and error_of(text)["code"] == "invalid_api_key" and not fake.requests


def test_an_unknown_key_is_refused_before_the_body_is_read(keyed, fake):
    # Declares a 60 KiB body and sends none of it: the 401 comes from the headers alone.
    for auth in (b"", b"Authorization: Bearer sk-wrong\r\n"):
        with socket.create_connection(("127.0.0.1", keyed.port), timeout=5) as client:
            client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                           + auth + b"Content-Length: 61440\r\n\r\n")
            start = time.monotonic()
            head = client.recv(4096)
        assert head.startswith(b"HTTP/1.1 401"), head[:200]
        assert b"invalid_api_key" in head and b"WWW-Authenticate: Bearer" in head
        assert time.monotonic() - start < 2
    assert not fake.requests


def test_a_body_written_to_disk_reaches_the_router_whole(keyed, fake):
    # Over the 16 KiB memory buffer: nginx keeps it in a temp file, the script reads that.
    big = {**CHAT, "messages": [{"role": "user", "content": "y" * 40 * 1024}], "stream": True}
    status, _, _ = call(keyed.base, "/v1/chat/completions", big, {"Authorization": "Bearer sk-a"})
    assert status == 200 and json.loads(last(fake)["body"]) == big


def test_rotated_keys_apply_without_a_restart(keyed, fake):
    original = (keyed.dir / "keys").read_text()
    keyed.write_keys(original + f"{digest('sk-new')} team-a\n")
    try:
        status, _, _ = call(keyed.base, "/v1/chat/completions", CHAT, {"Authorization": "Bearer sk-new"})
        assert status == 200
    finally:
        keyed.write_keys(original)
    status, _, _ = call(keyed.base, "/v1/chat/completions", CHAT, {"Authorization": "Bearer sk-new"})
    assert status == 401


def test_a_tenant_over_its_rate_gets_429_with_retry_after(keyed, fake):
    # team-c: 2 requests per minute, no burst; team-a has no limit.
    auth = {"Authorization": "Bearer sk-c"}
    statuses = []
    first_sent = time.monotonic()
    for _ in range(3):
        status, headers, text = call(keyed.base, "/v1/chat/completions", CHAT, auth)
        statuses.append(status)
    elapsed = time.monotonic() - first_sent
    # 2 per minute without burst: one request per 30 s, so exactly the first passes, and the
    # next may come when its 30 s have refilled (Retry-After, rounded up from the refill time:
    # 30 on a quick machine, less by the seconds the three calls took on a loaded one).
    assert statuses == [200, 429, 429]
    assert math.ceil(30 - elapsed) <= int(headers["retry-after"]) <= 30, (headers["retry-after"], elapsed)
    assert error_of(text)["code"] == "rate_limit_exceeded"
    assert len(fake.requests) == 1  # the refused two never reached the router
    for _ in range(3):
        assert call(keyed.base, "/v1/chat/completions", CHAT, {"Authorization": "Bearer sk-a"})[0] == 200


# --- the fold: integers, per-request state, bounds ----------------------------------------------

def test_big_integers_reach_the_router_exactly(gateway, fake):
    # 2^63 - 1 as a seed: a parse + re-serialise would send 9223372036854775807 as ...808 (a double).
    raw = (b'{"model": "qwen-small", "seed": 9223372036854775807, "temperature": 0.10,'
           b' "messages": [{"role": "user", "content": "caf\\u00e9"}], "stream": false}')
    status, _, _ = call(gateway.base, "/v1/chat/completions", raw=raw)
    sent = last(fake)["body"]
    assert status == 200
    assert '"seed": 9223372036854775807' in sent and '"temperature": 0.10' in sent and "caf\\u00e9" in sent
    parsed = json.loads(sent)
    assert parsed["stream"] is True and parsed["stream_options"] == {"include_usage": True}


def test_requests_on_one_keep_alive_connection_get_their_own_answers(gateway, fake):
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=20)
    answers = []
    for words in (("first",), ("second", " answer")):
        fake.words = list(words)
        connection.request("POST", "/v1/chat/completions", json.dumps(CHAT).encode(), {"Content-Type": "application/json"})
        reply = connection.getresponse()
        answers.append(json.loads(reply.read())["choices"][0]["message"]["content"])
    connection.close()
    fake.words = ["Hello", " from", " the", " fake", " engine"]
    assert answers == ["first", "second answer"]


def test_an_answer_over_the_bound_is_refused_and_the_next_one_is_whole(fake):
    settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL,), max_response_bytes=2048)
    with Gateway(settings) as gw:
        fake.words = ["word "] * 200
        try:
            status, _, text = call(gw.base, "/v1/chat/completions", CHAT)
            # Its status is chosen after the fold: nothing was sent before the cap was reached.
            assert status == 502 and error_of(text)["code"] == "response_too_large"
        finally:
            fake.words = ["Hello", " from", " the", " fake", " engine"]
        status, _, text = call(gw.base, "/v1/chat/completions", CHAT)
        assert status == 200 and json.loads(text)["choices"][0]["message"]["content"] == "Hello from the fake engine"


def test_a_mid_stream_engine_error_is_answered_as_the_openai_error(gateway, fake):
    # After the stream's 200, the answer is the engine's error with its status (the fold server
    # answers only once the fold is done), not a partial answer.
    fake.custom_chat = [
        {"id": "chatcmpl-e", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial"}}]},
        {"error": {"message": "engine died", "type": "InternalServerError", "param": None, "code": 500}},
    ]
    try:
        status, headers, text = call(gateway.base, "/v1/chat/completions", CHAT)
    finally:
        fake.custom_chat = None
    assert status == 500 and headers["content-type"] == "application/json"
    assert error_of(text) == {"message": "engine died", "type": "InternalServerError", "param": None, "code": 500}
    assert headers["x-request-id"] == last(fake)["headers"]["x-request-id"]


def test_a_stream_cut_before_its_end_is_a_502_not_a_partial_answer(gateway, fake):
    fake.custom_chat = [{"id": "chatcmpl-c", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial"}}]}]
    fake.no_done = True
    try:
        status, _, text = call(gateway.base, "/v1/chat/completions", CHAT)
    finally:
        fake.custom_chat = None
        fake.no_done = False
    assert status == 502 and error_of(text)["code"] == "bad_gateway"


def test_an_error_event_in_a_responses_stream_gets_its_status(gateway, fake):
    fake.responses_error = {"type": "error", "code": 429, "message": "engine queue full"}
    try:
        status, _, text = call(gateway.base, "/v1/responses", {"model": MODEL, "input": "hi"})
    finally:
        fake.responses_error = None
    assert status == 429 and error_of(text)["message"] == "engine queue full"


def test_a_body_at_the_limit_is_folded_too(gateway, fake):
    # The body sent on to the fold server carries the spliced stream members: longer than the
    # client's, which may be at maxBodyBytes exactly.
    pad = 64 * 1024 - len(json.dumps({**CHAT, "user": ""}))
    status, _, text = call(gateway.base, "/v1/chat/completions", {**CHAT, "user": "u" * pad})
    assert status == 200 and json.loads(text)["object"] == "chat.completion"
