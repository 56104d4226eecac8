"""The `openai` Python SDK through the whole path, every hop real except the engine:

    openai SDK -> OUR rendered gateway (nginx + njs: Debian's nginx 1.22.1 / njs 0.7.9)
               -> the real router (public Stargate build, our rendered args)
               -> the real pylon (our rendered args) -> QUIC tunnel -> fake OpenAI engine

The gateway's files are what ``compile_gateway`` puts in the ConfigMap for the same stack, with
the router Service's address replaced by the router's loopback port (nginx_kit.Gateway).
"""

from __future__ import annotations

import collections
import hashlib
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import replace

import openai
import pytest

from components.compile.gateway import settings as gateway_settings
from testkit.nginx_kit import Gateway
from testkit.stargate import MODEL, fold_differences

PULSAR = {"models": {MODEL: {"algorithm": "pulsar", "seed": "gateway-conformance", "requireCacheAffinityKey": True}}}
HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello"}]


@pytest.fixture
def gateway_over():
    """Start the rendered gateway in front of a started RouterStack."""
    started: list[Gateway] = []

    def start(stack, keys: str | None = None) -> Gateway:
        upstream = stack.http_url.removeprefix("http://")
        gw = Gateway(replace(gateway_settings(stack.stack), upstream=upstream), keys=keys).start()
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.stop()


def client(gw: Gateway, key: str = "unused", **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.base}/v1", api_key=key, max_retries=0, timeout=30, **options)


# --- the answers ---------------------------------------------------------------------------------

def test_openai_sdk_gets_every_answer_through_the_gateway(router_stack, gateway_over):
    stack = router_stack()
    gw = gateway_over(stack)
    sdk = client(gw)
    engine = stack.engines[0]

    chat = sdk.chat.completions.create(model=MODEL, messages=HELLO)
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == engine.text()
    assert chat.choices[0].finish_reason == "stop"
    assert chat.usage.completion_tokens > 0 and chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    # The engine got a stream with usage, as the gateway turned the call into one.
    sent = engine.user_requests("/v1/chat/completions")[-1]
    assert sent.json["stream"] is True and sent.json["stream_options"] == {"include_usage": True}

    stream = sdk.chat.completions.create(model=MODEL, messages=HELLO, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == engine.text()

    response = sdk.responses.create(model=MODEL, input="Say hello")
    assert response.status == "completed" and response.output_text == engine.text()

    events = list(sdk.responses.create(model=MODEL, input="Say hello", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == engine.text()

    embeddings = sdk.embeddings.create(model=MODEL, input=["a", "b"])
    assert len(embeddings.data) == 2 and embeddings.data[0].embedding

    assert [m.id for m in sdk.models.list()] == [MODEL]


def test_the_folded_answer_is_shaped_like_the_engines_own_non_streaming_answer(router_stack, gateway_over):
    stack = router_stack()
    gw = gateway_over(stack)
    request = json.dumps({"model": MODEL, "messages": HELLO}).encode()
    status, _, body = raw_post(gw, "/v1/chat/completions", request)
    ours = json.loads(body)
    engine = urllib.request.Request(stack.engines[0].url + "/v1/chat/completions", data=request,
                                    headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(engine, timeout=30) as reply:
        theirs = json.loads(reply.read())
    assert status == 200 and fold_differences(ours, theirs) == []
    assert ours["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
    assert ours["usage"] == theirs["usage"]


def test_contract_headers_reach_the_engine_and_internal_ones_stay_inside(router_stack, gateway_over):
    stack = router_stack()
    gw = gateway_over(stack)
    raw = client(gw).chat.completions.with_raw_response.create(
        model=MODEL, messages=HELLO, extra_headers={"x-request-id": "conf-req-1", "x-priority": "0",
                                                    "x-routing-key": "forged"})
    # The id the router, pylon and the engine see is the gateway's own (pylon keys its admission
    # on it); the caller's comes back for correlation in x-client-request-id.
    assert raw.headers["x-client-request-id"] == "conf-req-1"
    gateway_id = raw.headers["x-request-id"]
    assert len(gateway_id) == 32 and gateway_id != "conf-req-1"
    for name in ("x-inference-server-id", "x-inference-server-url", "x-stargate-cluster-id"):
        assert name not in raw.headers, name
    (seen,) = stack.engines[0].user_requests("/v1/chat/completions")
    assert seen.headers.get("x-request-id") == gateway_id
    # Router and pylon pass x-priority on to the engine (a direct request's arrives there): the
    # caller's "0" (most urgent) did not, nor its routing key.
    assert "x-priority" not in seen.headers and "x-routing-key" not in seen.headers
    assert seen.headers["x-model"] == MODEL and int(seen.headers["x-input-tokens"]) > 0
    direct = stack.post("/v1/chat/completions", {"model": MODEL, "stream": True, "messages": HELLO},
                        {"x-request-id": "direct", "x-model": MODEL, "x-input-tokens": "3", "x-priority": "0"})
    assert direct.status == 200
    assert stack.engines[0].user_requests("/v1/chat/completions")[-1].headers["x-priority"] == "0"


# --- errors --------------------------------------------------------------------------------------

def raw_post(gw, path, data: bytes, headers=None):
    request = urllib.request.Request(gw.base + path, data=data, headers={"Content-Type": "application/json",
                                                                         **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_each_error_is_an_openai_error(router_stack, gateway_over):
    stack = router_stack()
    gw = gateway_over(stack)
    sdk = client(gw)
    status, _, body = raw_post(gw, "/v1/chat/completions", b"{oops")
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_json"
    with pytest.raises(openai.BadRequestError, match="model parameter"):
        sdk.chat.completions.create(model="", messages=HELLO)
    with pytest.raises(openai.NotFoundError) as unknown:
        sdk.chat.completions.create(model="gpt-4o", messages=HELLO)
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as legacy:
        sdk.completions.create(model=MODEL, prompt="hello")
    assert "/v1/chat/completions" in legacy.value.message and "/v1/responses" in legacy.value.message
    with pytest.raises(openai.APIStatusError) as large:
        sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * (5 * 1024 * 1024)}])
    assert large.value.status_code == 413
    # Nothing of this reached an engine.
    assert stack.engines[0].user_requests() == []


def test_no_target_and_router_down_are_503_with_retry_after(router_stack, gateway_over):
    stack = router_stack()
    gw = gateway_over(stack)
    sdk = client(gw)
    # The pylon gone: the router has no target for the model.
    stack.pylons[0].stop()
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as no_target:
            sdk.chat.completions.create(model=MODEL, messages=HELLO, stream=stream)
        assert no_target.value.status_code == 503 and no_target.value.response.headers["retry-after"] == "2"
    # The router gone.
    stack.router.stop()
    with pytest.raises(openai.APIStatusError) as down:
        sdk.chat.completions.create(model=MODEL, messages=HELLO)
    assert down.value.status_code == 503 and down.value.response.headers["retry-after"] == "2"
    with pytest.raises(openai.APIStatusError) as listing:
        sdk.models.list()
    assert listing.value.status_code == 503


# --- API keys and tenants ------------------------------------------------------------------------

def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_api_keys_tenants_and_rate_limits(router_stack, gateway_over):
    tenants = [
        {"name": "team-a"},
        {"name": "team-limited", "rateLimit": {"requestsPerMinute": 1, "burst": 0}},
        {"name": "team-scoped", "routingKey": "team-scoped"},
    ]
    stack = router_stack(router={"gateway": {"replicas": 1, "apiKeys": {"secretName": "keys", "tenants": tenants}}})
    keys = "".join(f"{digest('sk-' + tenant['name'])} {tenant['name']}\n" for tenant in tenants)
    gw = gateway_over(stack, keys=keys)

    with pytest.raises(openai.AuthenticationError):
        client(gw, "sk-wrong").chat.completions.create(model=MODEL, messages=HELLO)
    with pytest.raises(openai.AuthenticationError):
        client(gw, "sk-wrong").models.list()
    assert client(gw, "sk-team-a").chat.completions.create(model=MODEL, messages=HELLO).choices[0].message.content

    limited = client(gw, "sk-team-limited")
    limited.chat.completions.create(model=MODEL, messages=HELLO)
    with pytest.raises(openai.RateLimitError) as over:
        limited.chat.completions.create(model=MODEL, messages=HELLO)
    assert over.value.response.headers["retry-after"] == "60"

    # A tenant's routing key scopes its requests on the real router: the pylons here register
    # unscoped (open worker auth), so the scoped tenant finds no target (503), while its key and
    # the model check passed (not 401/404).
    with pytest.raises(openai.APIStatusError) as scoped:
        client(gw, "sk-team-scoped").chat.completions.create(model=MODEL, messages=HELLO)
    assert scoped.value.status_code == 503
    assert len(stack.engines[0].user_requests("/v1/chat/completions")) == 2  # team-a and team-limited's first


# --- prefix-cache-aware routing -----------------------------------------------------------------

def test_a_conversation_stays_on_one_engine_and_conversations_spread(router_stack, gateway_over):
    stack = router_stack(router={"loadBalancer": PULSAR}, engines=2)
    gw = gateway_over(stack)
    sdk = client(gw)

    def engine_of(messages) -> str:
        before = {e.name: len(e.user_requests()) for e in stack.engines}
        sdk.chat.completions.create(model=MODEL, messages=messages)
        (name,) = [e.name for e in stack.engines if len(e.user_requests()) > before[e.name]]
        return name

    # One conversation, turn after turn (each repeats the leading messages): one engine.
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Topic A"}]
    engines = set()
    for turn in range(6):
        engines.add(engine_of(messages))
        messages = messages + [{"role": "assistant", "content": f"answer {turn}"},
                               {"role": "user", "content": f"follow-up {turn}"}]
    assert len(engines) == 1, engines
    # Different conversations (different first user message): both engines take some.
    spread = collections.Counter(
        engine_of([{"role": "user", "content": f"conversation {i}"}]) for i in range(24))
    # The router refuses a request without the key for this model (requireCacheAffinityKey):
    # every answer above carried the gateway's.
    assert len(spread) == 2 and min(spread.values()) >= 3, spread


# --- a client that leaves -------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "non-streaming"])
def test_a_client_that_leaves_cancels_the_request_at_the_engine(router_stack, gateway_over, stream):
    """The gateway closes its upstream connection when the client goes; the router cancels the
    tunnelled request and pylon stops reading the engine, whose writes then fail."""
    stack = router_stack()
    gw = gateway_over(stack)
    engine = stack.engines[0]
    engine.text = lambda: "Hello" + " tok" * 199  # 200 chunks, 0.05 s apart: 10 s if read to the end
    engine.chunk_delay_s = 0.05
    body = json.dumps({"model": MODEL, "messages": HELLO, "stream": stream}).encode()
    with socket.create_connection(("127.0.0.1", gw.port)) as client_socket:
        client_socket.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 10
        while not engine.user_requests("/v1/chat/completions") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.user_requests("/v1/chat/completions"), "the request never reached the engine"
        time.sleep(0.3)
    deadline = time.monotonic() + 8
    while engine.disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine.disconnects == 1


def test_the_gateway_serves_again_once_a_restarted_router_has_its_pylon_back(router_stack, gateway_over):
    """No gateway restart and no stale connection: it opens one connection per request."""
    stack = router_stack()
    gw = gateway_over(stack)
    sdk = client(gw)
    assert sdk.chat.completions.create(model=MODEL, messages=HELLO).choices[0].message.content
    stack.restart_router()
    stack.wait_registered(1)
    assert sdk.chat.completions.create(model=MODEL, messages=HELLO).choices[0].message.content == stack.engines[0].text()
    assert [m.id for m in sdk.models.list()] == [MODEL]


# --- a model with no server: requests held until it has one (router.gateway.hold) ---------------

def _held(gw: Gateway) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{gw.health_port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(f'gateway_held_requests{{model="{MODEL}"}}'))


@pytest.mark.parametrize("stream", [False, True], ids=["non-streaming", "streaming"])
def test_a_request_held_while_the_model_has_no_server_is_answered_once_its_pylon_registers(
        router_stack, gateway_over, stream):
    """The real router's `404 no_eligible_candidates` and its list of routable models are what
    the hold acts on: the request is held, then answered by the engine behind the pylon that
    registered meanwhile; the hold adds at most a poll (250 ms) to the registration."""
    import threading

    stack = router_stack({"gateway": {"hold": {"timeoutSeconds": 60}}})
    gw = gateway_over(stack)
    sdk = client(gw)
    stack.pylons[0].stop()
    deadline = time.monotonic() + 20
    while MODEL in stack.get("/v1/models").json.get("model_ids", []):
        assert time.monotonic() < deadline, "the router still lists the model without its pylon"
        time.sleep(0.1)
    answers: list = []

    def ask() -> None:
        reply = sdk.chat.completions.create(model=MODEL, messages=HELLO, stream=stream)
        text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices) if stream \
            else reply.choices[0].message.content
        answers.append((time.monotonic(), text))

    caller = threading.Thread(target=ask, daemon=True)
    caller.start()
    deadline = time.monotonic() + 10
    while _held(gw) < 1:
        assert time.monotonic() < deadline and caller.is_alive(), "the request was not held"
        time.sleep(0.05)
    stack.pylons[0].start()
    stack.wait_registered(1)
    registered = time.monotonic()
    caller.join(30)
    assert answers, "the held request was not answered"
    (answered, text), = answers
    assert text == stack.engines[0].text()
    assert answered - registered < 2.0
    assert _held(gw) == 0


# --- a next revision's share (models[].next) -------------------------------------------------------

def test_a_next_revision_gets_its_share_through_the_real_router_and_its_own_pylon(router_stack, gateway_over):
    """Two engine pods: the model's (its pylon registers `chat`) and its next revision's (its
    pylon, rendered for the revision, registers `chat-next`; its engine answers to `chat` too).
    The rendered gateway sends each conversation to one of them by the configured share, keeps it
    there turn after turn, and, once the revision's pylon is gone, sends its share to the model."""
    stack = router_stack(next_revision={"weight": 30, "source": {"repo": "Qwen/Qwen2.5-1.5B-Instruct"}},
                         engines=2, pod_models=(MODEL, f"{MODEL}-next"))
    assert f"--model-name={MODEL}-next" in stack.render.pylon[f"{MODEL}-next"]
    gw = gateway_over(stack)
    sdk = client(gw)
    serving, revision = stack.engines

    def answered_by(messages, stream=False) -> str:
        reply = sdk.chat.completions.create(model=MODEL, messages=messages, stream=stream)
        if stream:
            chunks = list(reply)
            assert {c.model for c in chunks} == {MODEL}
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert reply.model == MODEL  # the client's name, from either revision
        return reply.choices[0].message.content

    firsts = []
    for conversation in range(60):
        messages = [{"role": "user", "content": f"conversation {conversation}"}]
        first = answered_by(messages)
        follow = answered_by(messages + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}],
                             stream=True)
        assert follow == first, f"conversation {conversation} moved from {first!r} to {follow!r}"
        firsts.append(first)
    on_revision = firsts.count(revision.text())
    assert set(firsts) == {serving.text(), revision.text()}
    # 30% of 60 conversations: 18; 10 to 26 is within about 2.4 standard deviations (3.5).
    assert 10 <= on_revision <= 26, f"{on_revision} of 60 conversations on the next revision"

    # The revision's pylon goes (its pods stop serving): its share is answered by the model's.
    stack.pylons[1].stop()
    deadline = time.monotonic() + 20
    while f"{MODEL}-next" in stack.get("/v1/models").json.get("model_ids", []):
        assert time.monotonic() < deadline, "the router still lists the revision without its pylon"
        time.sleep(0.1)
    moved = [i for i, first in enumerate(firsts) if first == revision.text()][:5]
    for conversation in moved:
        for stream in (False, True):
            assert answered_by([{"role": "user", "content": f"conversation {conversation}"}], stream) == serving.text()
