"""Requests held while their model has no server (router.gateway.hold), on the real nginx + njs in
front of the stand-in router, which answers `404 no_eligible_candidates` for a model it does not
hold and lists only the models it holds (as the real router lists only routable ones).

The model "wakes" when a test adds it to the stand-in's models: the held requests then go on.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time

import pytest

from components.compile.gateway.nginx import GatewaySettings, Tenant
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway
from tests.gateway.test_gateway_nginx import call

ASLEEP = "sleepy"
AWAKE = "awake"
CHAT = {"model": ASLEEP, "messages": [{"role": "user", "content": "Hi"}]}
HOLD_SECONDS = 3


@pytest.fixture(scope="module")
def fake():
    with FakeRouter(models=(AWAKE,)) as router:
        yield router


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def gateway(fake):
    tenants = (Tenant("open", None, None, None, 0), Tenant("scoped", "route-a", None, None, 0),
               Tenant("other", None, None, None, 0))
    settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(ASLEEP, AWAKE), max_body_bytes=64 * 1024,
                               hold_timeout_seconds=HOLD_SECONDS, hold_max_per_model=2, hold_max_total=3,
                               keys_file="keys", tenants=tenants, sleepers=(ASLEEP,))
    with Gateway(settings, keys=f"{digest('sk-open')} open\n{digest('sk-scoped')} scoped\n{digest('sk-other')} other\n") as gw:
        yield gw


OPEN = {"Authorization": "Bearer sk-open"}
OTHER = {"Authorization": "Bearer sk-other"}
SCOPED = {"Authorization": "Bearer sk-scoped"}


@pytest.fixture(autouse=True)
def asleep(fake):
    fake.models[:] = [AWAKE]
    fake.requests.clear()
    yield


def metric(gateway, line_start: str) -> float:
    _, _, text = call(f"http://127.0.0.1:{gateway.health_port}", "/metrics")
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def held(gateway, model=ASLEEP) -> float:
    return metric(gateway, f'gateway_held_requests{{model="{model}"}}')


def in_background(fn):
    """Run ``fn`` in a thread; returns (thread, result list the thread appends to)."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append((time.monotonic(), fn())), daemon=True)
    thread.start()
    return thread, out


def wake_when_held(fake, gateway, count=1, after=0.5):
    """Wait until ``count`` requests are held, then wake the model; returns the wake time."""
    deadline = time.monotonic() + 5
    while held(gateway) < count:
        assert time.monotonic() < deadline, "the request was never held"
        time.sleep(0.05)
    time.sleep(after)
    fake.models.append(ASLEEP)
    return time.monotonic()


def model_calls(fake):
    return [r for r in fake.requests if r["method"] == "POST"]


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "non-streaming"])
def test_a_request_for_a_sleeping_model_is_held_and_answered_once_it_wakes(gateway, fake, stream):
    thread, out = in_background(lambda: call(gateway.base, "/v1/chat/completions", {**CHAT, "stream": stream}, OPEN))
    woke = wake_when_held(fake, gateway)
    thread.join(10)
    (answered, (status, _, text)), = out
    assert status == 200, text
    if stream:
        assert text.startswith("data: ") and text.rstrip().endswith("data: [DONE]")
    else:
        assert json.loads(text)["choices"][0]["message"]["content"] == "Hello from the fake engine"
    # Sent once before the wake (404) and once after it: never answered twice, never lost.
    calls = model_calls(fake)
    assert len(calls) == 2 and calls[0]["headers"]["x-request-id"] == calls[1]["headers"]["x-request-id"]
    assert answered - woke < 1.0  # released within a few polls of the wake
    # What is left of the deadline goes to the router, not the whole deadline again.
    assert int(calls[1]["headers"]["x-stargate-max-wait-ms"]) < int(calls[0]["headers"]["x-stargate-max-wait-ms"])
    assert held(gateway) == 0
    assert metric(gateway, f'gateway_held_total{{model="{ASLEEP}",outcome="released"}}') >= 1


def test_a_released_request_the_router_still_has_no_server_for_is_held_again_then_503(gateway, fake):
    # Listed, yet the call answers 404 (a server gone between the list and the call): held once
    # more (hold.perRequest: 2), then the gateway's own 503, never nginx's HTML 404.
    fake.status_override["/v1/chat/completions"] = 404
    try:
        thread, out = in_background(lambda: call(gateway.base, "/v1/chat/completions", {**CHAT, "stream": True}, OPEN))
        wake_when_held(fake, gateway, after=0.1)
        thread.join(10)
    finally:
        fake.status_override.clear()
    (_, (status, headers, text)), = out
    assert status == 503 and headers["retry-after"] == "2", text
    assert json.loads(text)["error"]["code"] == "service_unavailable"
    assert len(model_calls(fake)) == 3


def test_embeddings_are_held_too(gateway, fake):
    thread, out = in_background(lambda: call(gateway.base, "/v1/embeddings", {"model": ASLEEP, "input": "hi"}, OPEN))
    wake_when_held(fake, gateway, after=0.1)
    thread.join(10)
    (_, (status, _, text)), = out
    assert status == 200 and json.loads(text)["data"][0]["embedding"] == [0.1, 0.2, 0.3]


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "non-streaming"])
def test_a_model_that_does_not_wake_in_time_gets_503_with_retry_after_not_a_hang(gateway, fake, stream):
    started = time.monotonic()
    status, headers, text = call(gateway.base, "/v1/chat/completions", {**CHAT, "stream": stream}, OPEN)
    waited = time.monotonic() - started
    assert status == 503 and headers["retry-after"] == "2", text
    assert json.loads(text)["error"]["code"] == "service_unavailable"
    assert "started in time" in json.loads(text)["error"]["message"]
    assert HOLD_SECONDS - 0.1 < waited < HOLD_SECONDS + 2
    assert held(gateway) == 0


def test_a_burst_beyond_the_bound_gets_503_at_once_and_the_held_ones_are_answered(gateway, fake):
    threads = [in_background(lambda: call(gateway.base, "/v1/chat/completions", {**CHAT, "stream": True}, OPEN))
               for _ in range(2)]
    deadline = time.monotonic() + 5
    while held(gateway) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    status, headers, text = call(gateway.base, "/v1/chat/completions", CHAT, OPEN)  # the third, over maxPerModel
    assert status == 503 and headers["retry-after"] == "2" and time.monotonic() - started < 1.0
    assert "Too many requests are waiting" in json.loads(text)["error"]["message"]
    fake.models.append(ASLEEP)
    for thread, out in threads:
        thread.join(10)
        assert out[0][1][0] == 200
    assert metric(gateway, f'gateway_held_total{{model="{ASLEEP}",outcome="full"}}') >= 1


def test_the_total_bound_counts_every_model(gateway, fake):
    """maxTotal 3: two held for one model and one for another fill it; a fourth is refused."""
    fake.models[:] = []  # both asleep (AWAKE too)
    threads = [in_background(lambda: call(gateway.base, "/v1/chat/completions", {**CHAT, "stream": True}, OPEN))
               for _ in range(2)]
    threads.append(in_background(lambda: call(gateway.base, "/v1/chat/completions",
                                              {**CHAT, "model": AWAKE, "stream": True}, OPEN)))
    deadline = time.monotonic() + 5
    while held(gateway) + held(gateway, AWAKE) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    status, _, text = call(gateway.base, "/v1/chat/completions", {**CHAT, "model": AWAKE}, OPEN)
    assert status == 503 and "Too many requests are waiting" in text
    fake.models[:] = [AWAKE, ASLEEP]
    for thread, _ in threads:
        thread.join(10)


def test_a_scoped_tenant_is_not_held(gateway, fake):
    """The router lists unscoped servers only: a routing-keyed request could never be released."""
    started = time.monotonic()
    status, _, _ = call(gateway.base, "/v1/chat/completions", CHAT, SCOPED)
    assert status == 503 and time.monotonic() - started < 1.0


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "non-streaming"])
def test_a_client_that_leaves_while_held_is_no_longer_counted(gateway, fake, stream):
    # At once (within a second), not when the hold times out (3 s).
    body = json.dumps({**CHAT, "stream": stream}).encode()
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-open\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    deadline = time.monotonic() + 5
    while held(gateway) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sock.close()
    deadline = time.monotonic() + 1
    while held(gateway) > 0:
        assert time.monotonic() < deadline, "a request whose client left stayed counted"
        time.sleep(0.05)
    assert metric(gateway, f'gateway_held_total{{model="{ASLEEP}",outcome="gone"}}') >= 1
    assert len(model_calls(fake)) == 1  # never sent on


def test_without_a_hold_the_503_is_immediate(fake):
    settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(ASLEEP,), max_body_bytes=64 * 1024)
    with Gateway(settings) as gw:
        for stream in (True, False):
            started = time.monotonic()
            status, headers, _ = call(gw.base, "/v1/chat/completions", {**CHAT, "stream": stream})
            assert status == 503 and headers["retry-after"] == "2" and time.monotonic() - started < 1.0


def test_a_model_that_may_sleep_stays_in_the_model_list_while_asleep(gateway, fake):
    status, _, text = call(gateway.base, "/v1/models", headers=OPEN)
    assert status == 200 and sorted(m["id"] for m in json.loads(text)["data"]) == sorted([ASLEEP, AWAKE])
    fake.models[:] = []  # nothing routable: only the model that may sleep is listed
    status, _, text = call(gateway.base, "/v1/models", headers=OPEN)
    assert [m["id"] for m in json.loads(text)["data"]] == [ASLEEP]


def test_one_tenant_holding_the_pool_does_not_shut_out_another(gateway, fake):
    # maxPerModel 2, both held by `open`: `other`'s request is held too (it is under its share, 1
    # of 2), and one of `open`'s gives way with a 503 at once; `open`'s next is refused, it holds
    # its share. When the model wakes, `other`'s request is answered.
    mine = [in_background(lambda: call(gateway.base, "/v1/chat/completions", {**CHAT, "stream": True}, OPEN))
            for _ in range(2)]
    deadline = time.monotonic() + 5
    while held(gateway) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    theirs = in_background(lambda: call(gateway.base, "/v1/chat/completions", {**CHAT, "stream": True}, OTHER))
    deadline = time.monotonic() + 2
    while not any(out for _, out in mine):
        assert time.monotonic() < deadline, "no request of the tenant holding the pool gave way"
        time.sleep(0.05)
    (_, (status, headers, text)), = [out[0] for _, out in mine if out]
    assert status == 503 and headers["retry-after"] == "2" and "more than your share" in text, text
    assert not theirs[1], "the other tenant's request was refused"
    status, _, text = call(gateway.base, "/v1/chat/completions", CHAT, OPEN)
    assert status == 503 and "Too many requests are waiting" in text
    fake.models.append(ASLEEP)
    theirs[0].join(10)
    assert theirs[1][0][1][0] == 200
    for thread, _ in mine:
        thread.join(10)
    assert metric(gateway, f'gateway_held_total{{model="{ASLEEP}",outcome="preempted"}}') >= 1
