"""A next revision's share (models[].next), on the real nginx + njs in front of the stand-in router,
which records the `x-model` each request was routed to and answers `404 no_eligible_candidates`
for a router id it holds no server for (a next revision whose pods do not serve yet).
"""

from __future__ import annotations

import json

import pytest

from components.compile.gateway.nginx import GatewaySettings
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway
from tests.gateway.test_gateway_nginx import call

MODEL, NEXT = "tiny", "tiny-next"
PERCENT = 25
CONVERSATIONS = 400
# The share over 400 conversations: a binomial's standard deviation at 25% is about 2.2 points,
# so 7 points is over three of them (and the bucket hash is deterministic: the same every run).
TOLERANCE = 0.07


@pytest.fixture(scope="module")
def fake():
    with FakeRouter(models=(MODEL, NEXT)) as router:
        yield router


@pytest.fixture(scope="module")
def gateway(fake):
    settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL,), max_body_bytes=64 * 1024,
                               splits=((MODEL, NEXT, PERCENT),))
    with Gateway(settings) as gw:
        yield gw


@pytest.fixture(autouse=True)
def both_serve(fake):
    fake.models[:] = [MODEL, NEXT]
    fake.requests.clear()
    yield


def chat(gateway, conversation: int, turns: int = 1, stream: bool = False) -> tuple[int, str]:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"conversation {conversation}"}]
    for turn in range(1, turns):
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"turn {turn}"}]
    status, _, text = call(gateway.base, "/v1/chat/completions", {"model": MODEL, "messages": messages, "stream": stream})
    return status, text


def routed(fake) -> list[str]:
    return [r["headers"]["x-model"] for r in fake.requests]


def test_the_next_revision_gets_its_share_of_conversations_and_answers_under_the_models_name(gateway, fake):
    for conversation in range(CONVERSATIONS):
        status, text = chat(gateway, conversation)
        assert status == 200, text
        assert json.loads(text)["model"] == MODEL  # the stand-in echoes the body's model: the client's
    ids = routed(fake)
    assert set(ids) == {MODEL, NEXT}
    share = ids.count(NEXT) / len(ids)
    assert abs(share - PERCENT / 100) < TOLERANCE, f"{ids.count(NEXT)} of {len(ids)} went to {NEXT}"
    # The body is the client's: the router id is a header, the engine is asked for the model's name.
    assert {json.loads(r["body"])["model"] for r in fake.requests} == {MODEL}


def test_every_turn_of_a_conversation_stays_on_the_revision_it_started_on(gateway, fake):
    for conversation in range(40):
        fake.requests.clear()
        for turns in (1, 2, 3):
            status, text = chat(gateway, conversation, turns, stream=turns == 2)
            assert status == 200, text
        assert len(set(routed(fake))) == 1, f"conversation {conversation} moved: {routed(fake)}"


def first_on_next(gateway, fake) -> int:
    for conversation in range(100):
        fake.requests.clear()
        chat(gateway, conversation)
        if routed(fake) == [NEXT]:
            return conversation
    raise AssertionError("no conversation of 100 went to the next revision")


@pytest.mark.parametrize("stream", [False, True], ids=["folded", "streamed"])
def test_a_next_revision_without_a_server_sends_its_share_to_the_serving_one(gateway, fake, stream):
    conversation = first_on_next(gateway, fake)
    fake.models[:] = [MODEL]  # the next revision's pods do not serve (yet, or any more)
    fake.requests.clear()
    status, text = chat(gateway, conversation, stream=stream)
    assert status == 200, text
    assert routed(fake) == [NEXT, MODEL]
    assert text.rstrip().endswith("data: [DONE]") if stream else json.loads(text)["choices"]
    _, _, metrics = call(f"http://127.0.0.1:{gateway.health_port}", "/metrics")
    assert f'gateway_next_revision_fallbacks_total{{model="{NEXT}"}}' in metrics


def test_with_neither_revision_serving_the_client_gets_503_not_a_loop(gateway, fake):
    conversation = first_on_next(gateway, fake)
    fake.models[:] = []
    fake.requests.clear()
    status, text = chat(gateway, conversation, stream=True)
    assert status == 503, text
    assert routed(fake) == [NEXT, MODEL]
