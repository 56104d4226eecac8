"""Tenant limits as configured, on real nginx processes: two gateway replicas rendered from the
same settings share one limiter (limiter.conf, its own nginx), in front of the stand-in router.

What would break them: per-replica counting (each replica its own buckets, or `rate / replicas`)
lets one keep-alive client reach only its replica's share, and lets a client spread over the
replicas get every replica's burst; token limits need the usage read from the answers.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import time

import pytest

from components.compile.gateway.nginx import GatewaySettings
from components.config.gateway import GatewayConfig
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway, Limiter
from tests.gateway.test_gateway_nginx import CHAT, MODEL, call, digest

TENANTS = [
    # 600 requests per minute, the default burst (one second's worth: 10).
    {"name": "steady", "rateLimit": {"requestsPerMinute": 600}},
    # One request per 10 s, burst 3: what four quick requests get is exact, the fifth's wait too.
    {"name": "bursty", "rateLimit": {"requestsPerMinute": 6, "burst": 3}},
    # 60 per minute and the default burst (1): two simultaneous requests pass, a third does not.
    {"name": "default-burst", "rateLimit": {"requestsPerMinute": 60}},
    # 30 tokens per minute: a bucket of 30, refilled at 0.5 token/s.
    {"name": "tokens", "rateLimit": {"tokensPerMinute": 30}},
    {"name": "tokens-stream", "rateLimit": {"tokensPerMinute": 30}},
    {"name": "tokens-spread", "rateLimit": {"tokensPerMinute": 30}},
    # Streams whose client leaves before the usage chunk: charged what was streamed.
    {"name": "tokens-cut", "rateLimit": {"tokensPerMinute": 30}},
    {"name": "tokens-cut-fold", "rateLimit": {"tokensPerMinute": 30}},
    # One request a minute and 10 tokens a minute: refused by both, the later time is the retry.
    {"name": "both", "rateLimit": {"requestsPerMinute": 1, "burst": 0, "tokensPerMinute": 10}},
    {"name": "open"},
]
# The stand-in's usage per chat answer: prompt_tokens 7 + completion_tokens 5.
TOKENS_PER_ANSWER = 12


@pytest.fixture(scope="module")
def fake():
    with FakeRouter(models=(MODEL,)) as router:
        yield router


@pytest.fixture(scope="module")
def replicas(fake):
    config = GatewayConfig.model_validate({"apiKeys": {"secretName": "keys", "tenants": TENANTS}})
    settings = GatewaySettings.of(config, f"127.0.0.1:{fake.port}", (MODEL,))
    keys = "".join(f"{digest('sk-' + t['name'])} {t['name']}\n" for t in TENANTS)
    with Limiter(settings) as limiter:
        with Gateway(settings, keys=keys, limiter=limiter) as a, Gateway(settings, keys=keys, limiter=limiter) as b:
            yield a, b, limiter


class Client:
    """One keep-alive connection (as the OpenAI SDKs hold them) to one replica."""

    def __init__(self, gateway: Gateway, tenant: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=20)
        self.auth = f"Bearer sk-{tenant}"

    def chat(self, body: dict = CHAT) -> tuple[int, dict, str]:
        self.conn.request("POST", "/v1/chat/completions", json.dumps(body),
                          {"Content-Type": "application/json", "Authorization": self.auth})
        reply = self.conn.getresponse()
        text = reply.read().decode()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, text

    def close(self) -> None:
        self.conn.close()


def test_one_keep_alive_client_gets_its_rate_with_two_replicas(replicas):
    # 80% of 600/min (8 requests/s) for 5 s on one connection to replica a: every request is
    # answered (tolerance: none refused; the limit is 10/s with a 10-request burst, so the
    # client's pacing jitter on this shared machine stays far inside it). Counting per replica
    # (300/min each) refuses about 40% of them.
    a, _, _ = replicas
    client = Client(a, "steady")
    statuses = []
    start = time.monotonic()
    try:
        for i in range(40):
            time.sleep(max(0.0, start + i / 8 - time.monotonic()))
            statuses.append(client.chat()[0])
    finally:
        client.close()
    assert statuses.count(200) == 40, statuses


def test_the_burst_is_one_bucket_for_both_replicas_and_retry_after_is_the_refill_time(replicas):
    # burst 3: four requests at once pass, wherever they land; the next is due 10 s after the
    # first, and Retry-After says so (rounded up to whole seconds).
    a, b, _ = replicas
    clients = [Client(a, "bursty"), Client(b, "bursty")]
    results = []
    try:
        first = time.monotonic()
        for i in range(8):
            results.append(clients[i % 2].chat())
        elapsed = time.monotonic() - first
    finally:
        for c in clients:
            c.close()
    assert [status for status, _, _ in results] == [200] * 4 + [429] * 4
    status, headers, text = results[4]
    assert json.loads(text)["error"]["code"] == "rate_limit_exceeded"
    assert "requests per minute" in json.loads(text)["error"]["message"]
    # Due 10 s after the first was admitted: the wait when refused is 10 s minus the time between
    # the two checks (at most `elapsed`), rounded up.
    assert math.ceil(10 - elapsed) <= int(headers["retry-after"]) <= 10, (headers["retry-after"], elapsed)


def test_the_default_burst_lets_two_simultaneous_requests_pass(replicas):
    a, b, _ = replicas
    clients = [Client(a, "default-burst"), Client(b, "default-burst")]
    try:
        statuses = [clients[0].chat()[0], clients[1].chat()[0]]
        third, headers, _ = clients[0].chat()
    finally:
        for c in clients:
            c.close()
    assert statuses == [200, 200] and third == 429 and headers["retry-after"] == "1"


def test_a_token_limit_stops_a_tenant_after_its_tokens_with_the_refill_time(replicas):
    # 30 tokens: answers of 12 tokens leave 18, 6, then -6 (the third still passed: the bucket was
    # not empty). The fourth waits until 6 tokens refilled at 0.5/s: 12 s.
    a, _, _ = replicas
    client = Client(a, "tokens")
    try:
        first = time.monotonic()
        results = [client.chat() for _ in range(4)]
        elapsed = time.monotonic() - first
    finally:
        client.close()
    assert [status for status, _, _ in results] == [200, 200, 200, 429]
    _, headers, text = results[3]
    # 12 s less the time since the first check, rounded up: 12 unless the requests took over 1 s.
    assert math.ceil(12 - elapsed) <= int(headers["retry-after"]) <= 12, (headers["retry-after"], elapsed)
    assert "tokens per minute" in json.loads(text)["error"]["message"]
    assert json.loads(results[0][2])["usage"]["total_tokens"] == TOKENS_PER_ANSWER


def test_streamed_usage_is_counted_too(replicas):
    a, _, _ = replicas
    client = Client(a, "tokens-stream")
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    try:
        statuses = [client.chat(body)[0] for _ in range(4)]
    finally:
        client.close()
    assert statuses == [200, 200, 200, 429]


def test_usage_on_one_replica_reaches_the_limiter_for_the_other(replicas):
    # Three answers on a, then a request on b: a's periodic flush (every second) charged the
    # third answer's tokens, which only a had seen.
    a, b, _ = replicas
    client = Client(a, "tokens-spread")
    try:
        first = time.monotonic()
        assert [client.chat()[0] for _ in range(3)] == [200] * 3
    finally:
        client.close()
    time.sleep(2.5)
    other = Client(b, "tokens-spread")
    try:
        status, headers, _ = other.chat()
        elapsed = time.monotonic() - first
    finally:
        other.close()
    # 36 tokens against 30: 6 over at 0.5/s is 12 s from the first check, less the time since.
    assert status == 429 and math.ceil(12 - elapsed) <= int(headers["retry-after"]) <= math.ceil(12 - 2.5)


def test_when_the_limiter_is_down_requests_pass(fake):
    # Fail open: a limiter outage costs the limits, not the front door (docs/gateway.md).
    config = GatewayConfig.model_validate({"apiKeys": {"secretName": "keys", "tenants": [
        {"name": "bursty", "rateLimit": {"requestsPerMinute": 1, "burst": 0}}]}})
    settings = GatewaySettings.of(config, f"127.0.0.1:{fake.port}", (MODEL,))
    with Limiter(settings) as limiter, Gateway(settings, keys=f"{digest('sk-bursty')} bursty\n", limiter=limiter) as gw:
        client = Client(gw, "bursty")
        try:
            assert [client.chat()[0] for _ in range(2)] == [200, 429]
            limiter.stop()
            assert [client.chat()[0] for _ in range(3)] == [200] * 3
        finally:
            client.close()


# A prompt of ceil(160 / 4) + 4 = 44 estimated tokens: one call whose client leaves early
# overdraws a 30 tokens/min bucket by 14 tokens and what was streamed.
LONG = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 160}]}
LONG_ESTIMATE = 44


def leave_early(gateway: Gateway, tenant: str, stream: bool, fake) -> None:
    """A call whose client closes its connection mid-answer, before the usage chunk."""
    before = len(fake.disconnects)
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=20)
    conn.request("POST", "/v1/chat/completions", json.dumps({**LONG, "stream": stream}),
                 {"Content-Type": "application/json", "Authorization": f"Bearer sk-{tenant}"})
    if stream:
        reply = conn.getresponse()
        assert reply.status == 200 and reply.read1(65536).startswith(b"data: ")
    else:
        deadline = time.monotonic() + 5
        while not any(r["headers"].get("x-input-tokens") == str(LONG_ESTIMATE) for r in fake.requests[-1:]):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.5)  # a few events folded
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    deadline = time.monotonic() + 5
    while len(fake.disconnects) == before:
        assert time.monotonic() < deadline, "the router never saw the client leave"
        time.sleep(0.02)


@pytest.mark.parametrize("stream, tenant", [(True, "tokens-cut"), (False, "tokens-cut-fold")])
def test_a_call_whose_client_leaves_early_is_charged_what_was_streamed(replicas, fake, stream, tenant):
    # Charged the prompt's estimate (44) and what was streamed, a 30 tokens/min bucket is then
    # overdrawn: the next call waits for the refill (2 s a token). Uncharged, it passed.
    a, _, _ = replicas
    fake.delay = 0.2
    try:
        leave_early(a, tenant, stream, fake)
    finally:
        fake.delay = 0.0
    # The charge reaches the limiter with this replica's next check or its flush (every second,
    # whichever comes first): the model list, which counts too, is refused once it has.
    deadline = time.monotonic() + 3
    while call(a.base, "/v1/models", headers={"Authorization": f"Bearer sk-{tenant}"})[0] != 429:
        assert time.monotonic() < deadline, "the call whose client left was never charged"
        time.sleep(0.1)
    client = Client(a, tenant)
    try:
        status, headers, text = client.chat()
    finally:
        client.close()
    assert status == 429 and "tokens per minute" in json.loads(text)["error"]["message"], (status, text)
    # 44 + the events seen (8 at most) tokens against 30, 2 s each.
    assert (LONG_ESTIMATE - 30) * 2 - 5 <= int(headers["retry-after"]) <= (LONG_ESTIMATE + 8 - 30) * 2, headers



def test_retry_after_is_when_both_limits_admit_again(replicas):
    # After one answer (12 tokens) the token bucket of 10/min refills above zero in 12 s, the
    # request rate of 1/min admits the next in 60 s: a retry after 12 s would be refused.
    a, _, _ = replicas
    client = Client(a, "both")
    try:
        assert client.chat()[0] == 200
        status, headers, text = client.chat()
    finally:
        client.close()
    assert status == 429 and 58 <= int(headers["retry-after"]) <= 60, headers
    assert "requests per minute" in json.loads(text)["error"]["message"]
