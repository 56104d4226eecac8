"""The whole path with a real engine (issue 31 item 3): every hop real, nothing faked.

    openai SDK -> OUR rendered gateway (nginx 1.26.3 + njs 0.8.9, testkit/nginx_kit.py)
               -> the real router (public Stargate build, our rendered args)
               -> the real pylon (our rendered args) -> QUIC tunnel
               -> the real vLLM of the line: the engine tests' one server per line
                  (tests/engine/conftest.py), run as rendered on the weights the real puller wrote

The router and pylon are the conformance kit's (testkit/stargate.py, with ``upstreams``: one
pylon in front of the running vLLM instead of a fake engine), rendered for the engine tests' own
stack with its router on the line the binaries are (``public-0.4``); the first test checks that
this stack renders exactly the vLLM server that runs. What is rewritten to run outside a pod is
the kit's list (ports, loopback addresses, pod names), and the gateway's upstream is the router's
loopback port. One path per line (module scope), started after the engine's own tests' server is
up and stopped before that line's termination test (conftest: ``stops_engine`` runs last).
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import openai
import pytest

from components.compile import compile_stack
from tests.engine.conftest import only
from tests.engine.whole_path import engine_counter, fold_differences, running_path

pytestmark = pytest.mark.engine

ADAPTER = "tiny-lora"
PROMPT = [{"role": "user", "content": "Say hello."}]
# pylon's defaults for its own traffic to the engine (pylon/src/main.rs of the vendored build):
# --active-canary-interval-ms 5000, canaries of --canary-max-generation-threshold 237 tokens.
CANARY_INTERVAL_S = 5.0


@pytest.fixture(scope="module")
def whole_path(engine, tmp_path_factory):
    with running_path(engine, tmp_path_factory.mktemp(f"path-{engine.line}")) as path:
        yield path


# --- what runs is what was rendered --------------------------------------------------------------

def test_the_path_is_rendered_for_the_stack_whose_server_runs(whole_path):
    """The stack behind the path renders the very vLLM container the engine tests started; pylon
    runs its rendered args with only the kit's loopback rewrites."""
    objects = compile_stack(whole_path.config)
    model = whole_path.config.models[0].name
    pod = only(objects, "Deployment", model)["spec"]["template"]["spec"]
    (server,) = [c for c in pod["containers"] if c["name"] == "server"]
    assert server == whole_path.engine.server
    (pylon,) = [c for c in pod["containers"] if c["name"] == "pylon"]
    assert whole_path.stack.render.pylon[model] == pylon["args"]
    rewritten = {r.split(" -> ")[0].split(": ", 1)[1].split("=")[0] for r in whole_path.stack.rewrites
                 if r.startswith("pylon 0: ") and " -> " in r}
    assert rewritten == {"--upstream-http-base-url", "--stargate-address", "--metrics-port", "--inference-server-id"}
    assert f"--upstream-http-base-url={whole_path.engine.base_url}" in whole_path.stack.pylons[0].argv


# --- the answers ----------------------------------------------------------------------------------

def test_the_model_list(whole_path):
    listed = [m.id for m in whole_path.sdk().models.list()]
    assert sorted(listed) == sorted([whole_path.engine.served_name, ADAPTER])


def test_chat_without_streaming_is_folded_into_vllms_own_shape(whole_path):
    """The gateway asks the engine for a stream and folds it: the answer has the fields, in the
    order and of the types, of vLLM's own non-streaming answer to the same request, and the same
    text (greedy)."""
    name = whole_path.engine.served_name
    asked = dict(model=name, messages=PROMPT, max_tokens=8, temperature=0)
    ours = whole_path.sdk().chat.completions.with_raw_response.create(**asked)
    theirs = whole_path.direct().chat.completions.with_raw_response.create(**asked)
    assert ours.http_response.status_code == 200
    mine, real = json.loads(ours.text), json.loads(theirs.text)
    assert mine["model"] == name and mine["object"] == "chat.completion"
    assert mine["choices"][0]["finish_reason"] in ("stop", "length")
    assert mine["usage"]["completion_tokens"] >= 1
    assert mine["usage"]["total_tokens"] == mine["usage"]["prompt_tokens"] + mine["usage"]["completion_tokens"]
    # Same prompt, same tokenizer: the engine counted the same prompt both ways.
    assert mine["usage"]["prompt_tokens"] == real["usage"]["prompt_tokens"]
    # Alike but for what no stream chunk carries (fold_differences: those must be null in vLLM's
    # own answer, e.g. 0.11's usage.prompt_tokens_details), field for field and in vLLM's order.
    assert fold_differences(mine, real) == [], (mine, real)
    assert mine["choices"][0]["message"]["content"] == real["choices"][0]["message"]["content"]


def test_chat_streaming(whole_path):
    name = whole_path.engine.served_name
    stream = whole_path.sdk().chat.completions.create(
        model=name, messages=PROMPT, max_tokens=8, temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks and all(c.model == name for c in chunks)
    finished = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finished in (["stop"], ["length"])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    assert text or chunks[-1].usage.completion_tokens == 0


def test_responses(whole_path):
    name = whole_path.engine.served_name
    reply = whole_path.sdk().responses.create(model=name, input="Say hello.", max_output_tokens=8)
    assert reply.model == name
    assert reply.status in ("completed", "incomplete")
    assert isinstance(reply.output_text, str)
    assert reply.usage.output_tokens >= 1


def test_the_adapter_by_its_name(whole_path):
    """The adapter the rendered LoRA init container placed, asked by name at the gateway: the
    router routes it to the model's pylon, vLLM's filesystem resolver serves it."""
    asked = dict(messages=PROMPT, max_tokens=4, temperature=0)
    with_adapter = whole_path.sdk().chat.completions.create(model=ADAPTER, **asked)
    assert with_adapter.model == ADAPTER
    base = whole_path.sdk().chat.completions.create(model=whole_path.engine.served_name, **asked)
    # The adapter's own answer (scripts/localmodel/make_model.py ADAPTER_ANSWERS), not the base's.
    assert with_adapter.choices[0].message.content != base.choices[0].message.content
    assert with_adapter.choices[0].message.content.startswith("Kub")


# --- an engine error ------------------------------------------------------------------------------

def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize("stream", [False, True], ids=["non-streaming", "streaming"])
def test_a_bad_parameter_is_vllms_own_openai_400(whole_path, stream):
    """A request only the engine can refuse (more tokens than the model's context): vLLM's 400,
    its OpenAI error and message, reach the client unchanged."""
    body = {"model": whole_path.engine.served_name, "messages": PROMPT, "max_tokens": 100_000, "stream": stream}
    direct_status, direct = post(f"{whole_path.engine.base_url}/v1/chat/completions", body)
    assert direct_status == 400, direct
    status, ours = post(f"{whole_path.gateway.base}/v1/chat/completions", body)
    assert status == 400, ours
    assert ours["error"]["message"] == direct["error"]["message"]
    assert re.search(r"max_tokens|maximum context length", ours["error"]["message"]), ours
    with pytest.raises(openai.BadRequestError) as refused:
        whole_path.sdk().chat.completions.create(**{k: v for k, v in body.items()})
    assert refused.value.status_code == 400 and refused.value.message


# --- a client that leaves -------------------------------------------------------------------------

# Whether the line counts a client's abort in vllm:request_success_total{finished_reason="abort"}.
# Neither does. Read in the wheels: a disconnect ends AsyncLLM.generate with CancelledError ->
# AsyncLLM.abort -> OutputProcessor.abort_requests (0.11: vllm/v1/engine/output_processor.py
# l.325-354; 0.32: l.552-602), which pops the request and queues its final ABORT output but never
# calls _update_stats_from_finished, the only path to the counter (0.11: vllm/v1/metrics/loggers.py
# l.299-308, 582): the series exists, with the label, and stays put (seen on both lines: 0 more).
# What each line shows is the engine itself letting go: vllm:num_requests_running back to 0 and
# vllm:generation_tokens_total no longer growing.
COUNTS_CLIENT_ABORTS = {"0.11": False, "0.32": False}


def test_a_client_that_leaves_mid_stream_is_an_abort_in_vllm(whole_path):
    """The SDK closes its stream after a few tokens: the gateway closes its upstream, the router
    cancels the tunnelled request, pylon drops its engine connection, and vLLM aborts the
    request: nothing left running, no more of the 1500 tokens asked for generated, and where the
    line counts aborts, one more vllm:request_success_total{finished_reason="abort"}."""
    name = whole_path.engine.served_name
    before = whole_path.engine_metrics()
    stream = whole_path.sdk().chat.completions.create(
        model=name, messages=PROMPT, max_tokens=1500, temperature=0, stream=True, extra_body={"ignore_eos": True})
    seen = 0
    for chunk in stream:
        seen += bool(chunk.choices and chunk.choices[0].delta.content)
        if seen >= 3:
            break
    left = time.monotonic()
    stream.close()

    def aborted(samples) -> float:
        return engine_counter(samples, "vllm:request_success_total", model_name=name, finished_reason="abort")

    def generated(samples) -> float:
        return engine_counter(samples, "vllm:generation_tokens_total", model_name=name)

    counts = COUNTS_CLIENT_ABORTS[whole_path.engine.line]
    deadline = left + 15
    while time.monotonic() < deadline:
        now = whole_path.engine_metrics()
        idle = engine_counter(now, "vllm:num_requests_running", model_name=name) == 0
        if idle and (aborted(now) > aborted(before) or not counts):
            break
        time.sleep(0.2)
    let_go = time.monotonic() - left
    assert idle, "vLLM still runs the request the client left"
    # The labelled series exists on every line (the dashboard reads it); whether it moves is the line's.
    assert any(labels.get("finished_reason") == "abort" for labels, _ in now["vllm:request_success_total"])
    assert aborted(now) == aborted(before) + (1 if counts else 0), \
        f"vLLM {whole_path.engine.line} counted {aborted(now) - aborted(before)} aborts since the client left"
    # Far fewer than the 1500 tokens asked for (pylon's canaries, at most 237 tokens each every
    # 5 s, may add theirs): the engine stopped because the client left, not at the end.
    time.sleep(1)
    later = whole_path.engine_metrics()
    assert 3 <= generated(later) - generated(before) < 1000, generated(later) - generated(before)
    print(f"vLLM {whole_path.engine.line}: let go {let_go:.2f}s after the client left, "
          f"{generated(later) - generated(before):g} tokens generated")


# --- pylon's own traffic ------------------------------------------------------------------------

def test_pylons_health_checks_and_canaries_succeed_against_the_real_server(whole_path):
    """pylon checked the engine's health path before registering (its startup wait) and vLLM
    answered 200; with no client traffic for longer than pylon's canary interval, the engine still
    finishes requests (pylon's canaries: only pylon talks to it now); pylon logs no failed canary
    or health check, and the model stays routable."""
    name = whole_path.engine.served_name
    finished = engine_counter(whole_path.engine_metrics(), "vllm:request_success_total", model_name=name)
    health_path = f"GET {whole_path.engine.server['startupProbe']['httpGet']['path']} "
    time.sleep(CANARY_INTERVAL_S * 1.5)
    canaries = engine_counter(whole_path.engine_metrics(), "vllm:request_success_total", model_name=name) - finished
    assert canaries >= 1, "no canary reached vLLM within pylon's canary interval"
    log = whole_path.pylon_log()
    # pylon's warnings when a canary or the engine's health fails (pylon-lib bringup/lifecycle.rs,
    # model_lifecycle.rs of the vendored build).
    assert not re.search(r"canary failed|initialization failed|waiting for the upstream to answer", log), log[-3000:]
    accesses = [line for t, line in whole_path.engine.log if t > whole_path.started and health_path in line]
    assert accesses and all('" 200' in line for line in accesses), accesses[-5:]
    assert name in whole_path.stack.get("/v1/models").json["model_ids"]
