"""The gateway's Prometheus metrics, scraped from the real nginx after known requests."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from components.compile.gateway.nginx import GatewaySettings, Tenant
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway
from tests.gateway.test_gateway_nginx import CHAT, MODEL, call, digest

SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")


def scrape_once(gw: Gateway) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{gw.health_port}/metrics", timeout=5) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = reply.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    assert "# TYPE gateway_request_duration_seconds histogram" in text
    bounds = [line.split('le="')[1].split('"')[0] for line in text.splitlines()
              if line.startswith("gateway_request_duration_seconds_bucket{tenant=\"team-a\",model=\"qwen-small\"")]
    assert bounds[-1] == "+Inf" and [float(b) for b in bounds[:-1]] == sorted(float(b) for b in bounds[:-1]), bounds
    return samples


def scrape(gw: Gateway, answered: int) -> dict[str, float]:
    """The samples once all `answered` requests are counted. A request is counted in nginx's log
    phase, after its answer went out, and the gateway runs two workers: a scrape the other worker
    takes can arrive before the last answer's worker has logged it (seen in CI: the final 401)."""
    deadline = time.monotonic() + 5
    while True:
        samples = scrape_once(gw)
        counted = sum(v for k, v in samples.items() if k.startswith("gateway_requests_total{"))
        if counted >= answered or time.monotonic() > deadline:
            assert counted == answered, f"{counted} of {answered} requests counted: {samples}"
            return samples
        time.sleep(0.05)


@pytest.fixture(scope="module")
def fake():
    with FakeRouter(models=(MODEL,), delay=0.02) as router:
        yield router


def test_requests_latency_and_tokens_per_tenant_and_model(fake):
    tenants = (Tenant("team-a", None, None, None, 0), Tenant("team-c", None, None, 1, 0))
    # Folds enough for each tenant's sequential calls even when a loaded machine runs the client's
    # next call before nginx's log phase gave the last one's fold back.
    settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL,), keys_file="keys", tenants=tenants,
                               in_flight_folds=8)
    keys = f"{digest('sk-a')} team-a\n{digest('sk-c')} team-c\n"
    with Gateway(settings, keys=keys) as gw:
        a, c = {"Authorization": "Bearer sk-a"}, {"Authorization": "Bearer sk-c"}
        assert call(gw.base, "/v1/chat/completions", CHAT, a)[0] == 200
        assert call(gw.base, "/v1/chat/completions", CHAT, a)[0] == 200
        streamed = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        assert call(gw.base, "/v1/chat/completions", streamed, a)[0] == 200
        assert call(gw.base, "/v1/chat/completions", {**CHAT, "model": "nope"}, a)[0] == 404
        assert call(gw.base, "/v1/chat/completions", CHAT, c)[0] == 200
        assert call(gw.base, "/v1/chat/completions", CHAT, c)[0] == 429
        assert call(gw.base, "/v1/chat/completions", CHAT)[0] == 401
        m = scrape(gw, answered=7)
    served = '{tenant="team-a",model="qwen-small"'
    assert m[f'gateway_requests_total{served},status="200"}}'] == 3
    # Not admitted yet when refused: no model label value.
    assert m['gateway_requests_total{tenant="team-a",model="",status="404"}'] == 1
    assert m['gateway_requests_total{tenant="",model="",status="401"}'] == 1
    assert m['gateway_requests_total{tenant="team-c",model="",status="429"}'] == 1
    assert m['gateway_rate_limited_total{tenant="team-c",model="",limit="requests"}'] == 1
    # The stand-in reports 7 prompt and 5 completion tokens per answer (folded and streamed).
    assert m[f"gateway_prompt_tokens_total{served}}}"] == 21
    assert m[f"gateway_completion_tokens_total{served}}}"] == 15
    # Each answer streams 7 events 20 ms apart: at least 0.1 s to the end, the first byte sooner.
    assert m[f"gateway_request_duration_seconds_count{served}}}"] == 3
    assert m[f'gateway_request_duration_seconds_bucket{served},le="0.1"}}'] == 0
    assert m[f'gateway_request_duration_seconds_bucket{served},le="+Inf"}}'] == 3
    assert m[f"gateway_request_duration_seconds_sum{served}}}"] >= 0.3
    assert m[f"gateway_time_to_first_byte_seconds_count{served}}}"] == 3
    assert m[f"gateway_time_to_first_byte_seconds_sum{served}}}"] < m[f"gateway_request_duration_seconds_sum{served}}}"]
