"""Prefix-cache-aware routing on the real router: router.loadBalancer rendered as the
--lb-config-path file, two engine pods (two pylons, two fake engines)."""

from __future__ import annotations

import collections

from testkit.stargate import chat_body, contract_headers

PULSAR = {"models": {"chat": {"algorithm": "pulsar", "seed": "conformance-v1", "requireCacheAffinityKey": True}}}


def served_by(stack, key: str) -> str:
    reply = stack.post("/v1/chat/completions", chat_body(stream=True),
                       contract_headers(stack.model, x_cache_affinity_key=key))
    assert reply.status == 200, reply.body
    return reply.headers["x-inference-server-id"]


def test_one_affinity_key_lands_on_one_engine_and_different_keys_spread(router_stack):
    stack = router_stack(router={"loadBalancer": PULSAR}, engines=2)
    for key in ("conversation-a", "conversation-b"):
        assert len({served_by(stack, key) for _ in range(8)}) == 1, key
    spread = collections.Counter(served_by(stack, f"conversation-{i}") for i in range(24))
    assert len(spread) == 2 and min(spread.values()) >= 3, spread
    # The engines saw what the router says: each user request reached exactly one of them.
    assert sum(len(e.user_requests("/v1/chat/completions")) for e in stack.engines) == 16 + 24


def test_the_required_key_is_enforced(router_stack):
    stack = router_stack(router={"loadBalancer": PULSAR}, engines=1)
    missing = stack.post("/v1/chat/completions", chat_body(stream=True))
    assert missing.status == 400
    assert stack.engines[0].user_requests() == []
