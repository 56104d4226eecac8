"""The rendered server is what runs (issue 31 item 2): the vLLM container `render` writes for
stacks/Pulumi.local.yaml's model (with a LoRA adapter, metrics and queue autoscaling on), started
in the real vLLM of each line the kit has, on the weights the rendered puller wrote from the
loopback hub, with the adapter the rendered LoRA init container placed (tests/engine/conftest.py).

The substitutions (tests/engine/rendered.py), asserted below to be the only ones: the executable
(the kit's `vllm`), mount paths -> temp dirs, `--host` 127.0.0.1, `--port` a free port,
`--tensor-parallel-size` 1 (rendered 1 already for `gpus: 1`: no change), the CPU env, HOME.
What a CPU cannot show: GPU memory utilization, CUDA graphs, NCCL/tensor parallel, and the
engine's speed on a GPU; what is not run: the kubelet (its probes are emulated from their specs)
and the preStop's 120 s sleep (its effect, the time left to the server after it, is asserted).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from components.compile import dashboard as dash
from testkit.engine import Engine, only, parse_exposition, probe_port
from testkit.engine_kit import CPU_ENV

pytestmark = pytest.mark.engine

ADAPTER = "tiny-lora"
PROMPT = [{"role": "user", "content": "Say hello."}]
# Labels the Prometheus Operator puts on every scraped target (a ServiceMonitor's defaults): a
# query may select on them, the engine never exports them.
TARGET_LABELS = {"namespace", "service", "pod", "container", "endpoint", "job", "instance"}


def client(engine: Engine) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{engine.base_url}/v1", api_key="unused", max_retries=0, timeout=60)


# --- what runs is what was rendered ---------------------------------------------------------------

def test_the_only_substitutions_are_the_listed_cpu_ones(engine):
    rendered = [*engine.server["command"], *engine.server["args"]]
    assert engine.server["command"] == ["vllm", "serve"]
    subs = {what: (before, after) for what, before, after in engine.run.substitutions}
    model_path = rendered.index("/model-store")
    assert sorted(subs) == sorted([
        "argv[0]", f"argv[{model_path}]", "--host", "--port", "env VLLM_LORA_RESOLVER_CACHE_DIR",
        "env HOME", *(f"env {name}" for name in CPU_ENV),
    ])
    assert subs["--host"] == ("0.0.0.0", "127.0.0.1") and subs["--port"][0] == "8000"
    assert subs["env HOME"][0] == "/tmp"
    assert all(subs[f"env {name}"] == ("(unset)", value) for name, value in CPU_ENV.items())
    # Tensor parallel is the rendered value itself (gpus: 1).
    assert rendered[rendered.index("--tensor-parallel-size") + 1] == "1"
    # Every other argument and env value reaches vLLM verbatim.
    changed = {int(w[5:-1]) for w in subs if w.startswith("argv[")} | {
        rendered.index(flag) + 1 for flag in ("--host", "--port")}
    assert [a for i, a in enumerate(rendered) if i not in changed] == \
           [a for i, a in enumerate(engine.run.argv) if i not in changed]
    for item in engine.server["env"]:
        if f"env {item['name']}" not in subs:
            assert engine.run.env[item["name"]] == item["value"], item["name"]
    assert set(engine.run.env) == {e["name"] for e in engine.server["env"]} | set(CPU_ENV) | {"PATH", "LANG"}
    # The pullers: the client binary and mount paths only (the hub endpoint is the stack's own,
    # swapped before render: the rendered HF_ENDPOINT is the loopback hub).
    puller = {what for what, _, _ in engine.pulls["puller"].substitutions}
    assert puller == {"argv[0]", "argv[6]", "env HF_HOME", "env HOME"}
    verify = {what for what, _, _ in engine.pulls["verify"].substitutions}
    assert verify == {"argv[0]", "argv[4]", "env HF_HOME", "env HOME"}
    init = {what for what, _, _ in engine.pulls["lora-cache-init"].substitutions}
    assert init == {"argv[0]", "env HF_HOME", "env HOME", "env ADAPTERS_DIR", "env BASE_MODEL"}
    for run in engine.pulls.values():
        for what, before, _ in run.substitutions:
            assert what == "argv[0]" or before.startswith(("/model-store", "/tmp", "/lora-cache")), what


# --- probes ----------------------------------------------------------------------------------------

def test_probes_answer_on_their_port_and_only_once_the_model_is_loaded(engine):
    rendered_port = engine.server["args"][engine.server["args"].index("--port") + 1]
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = engine.server[kind]
        # The probe's port is the one vLLM listens on (mapped to this run's port, like --port).
        assert probe_port(engine.server, probe) == int(rendered_port), kind
        status, _ = engine.get(probe["httpGet"]["path"], timeout=probe["timeoutSeconds"])
        assert 200 <= status < 400, (kind, probe["httpGet"]["path"], status)
    # Before the first success, every poll of the startup probe failed; at it, the model was
    # loaded (the engine logged its weights) and listed.
    failures = [status for _, status in engine.polls[:-1]]
    assert failures and all(status != 200 for status in failures)
    loaded = [t for t, line in engine.log if re.search(r"(Loading weights took|Model loading took)", line)]
    assert loaded and loaded[0] < engine.ready_at, "the probe answered before the weights were loaded"
    assert engine.models_at_ready == [engine.served_name]
    # Within the startup probe's budget (failureThreshold x periodSeconds), with room to spare.
    probe = engine.server["startupProbe"]
    assert engine.ready_at - engine.started < probe["failureThreshold"] * probe["periodSeconds"] / 2


# --- the OpenAI API ------------------------------------------------------------------------------

def test_the_model_list_names_the_served_model_on_the_pulled_weights(engine):
    models = {m.id: m for m in client(engine).models.list().data}
    # The name clients, the gateway (its admitted models) and the router (x-model) use is the
    # model's own name in the stack: the engine must list exactly that one.
    (model,) = engine.config.models
    assert model.name in models, (model.name, sorted(models))
    assert engine.served_name in models
    assert models[engine.served_name].root == str(engine.weights)


def test_chat_without_streaming(engine):
    reply = client(engine).chat.completions.create(model=engine.served_name, messages=PROMPT,
                                                    max_tokens=8, temperature=0)
    assert reply.model == engine.served_name
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert isinstance(reply.choices[0].message.content, str)
    assert reply.usage.completion_tokens >= 1 and reply.usage.prompt_tokens >= 1


def test_chat_streaming(engine):
    stream = client(engine).chat.completions.create(
        model=engine.served_name, messages=PROMPT, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    assert all(c.model == engine.served_name for c in chunks)
    finished = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finished in (["stop"], ["length"])
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1


def test_responses(engine):
    reply = client(engine).responses.create(model=engine.served_name, input="Say hello.", max_output_tokens=8)
    assert reply.model == engine.served_name
    assert reply.status in ("completed", "incomplete")
    assert isinstance(reply.output_text, str)


# What each line answers /v1/embeddings with for a chat model (status, the body's error). 0.11
# answers 200 with an OpenAI error object in the body (code 400): the SDK then raises "No
# embedding data received" and the gateway, which passes statuses through, counts a success.
# 0.32 mounts no embeddings route for a generate model: 404 {"detail": "Not Found"}.
EMBEDDINGS = {"0.11": (200, "does not support embeddings api"), "0.32": (404, "not found")}


def test_embeddings_to_the_chat_model_are_an_openai_error(engine):
    """The gateway routes /v1/embeddings (components/compile/gateway/nginx.py) to the model's
    server; the chat model the program renders (generate runner) does not serve them."""
    request = urllib.request.Request(
        f"{engine.base_url}/v1/embeddings", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"model": engine.served_name, "input": "hello"}).encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            status, body = reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        status, body = error.code, json.loads(error.read())
    want_status, want_words = EMBEDDINGS[engine.line]
    assert status == want_status, (status, body)
    error = body.get("error") or {"code": status, "message": body.get("detail", "")}
    assert 400 <= error["code"] < 500 and want_words in error["message"].lower(), body


# --- LoRA --------------------------------------------------------------------------------------

def test_the_adapter_the_init_container_placed_is_served_by_its_name(engine):
    placed = engine.adapters / "adapters" / ADAPTER
    assert (placed / "adapter_config.json").is_file()
    api = client(engine)
    asked = dict(messages=PROMPT, max_tokens=4, temperature=0)
    with_adapter = api.chat.completions.create(model=ADAPTER, **asked)
    assert with_adapter.model == ADAPTER
    base = api.chat.completions.create(model=engine.served_name, **asked)
    # The adapter was trained to its own answer (scripts/localmodel/make_model.py ADAPTER_ANSWERS).
    assert with_adapter.choices[0].message.content != base.choices[0].message.content
    assert with_adapter.choices[0].message.content.startswith("Kub")
    listed = {m.id: m for m in api.models.list().data}
    assert ADAPTER in listed and listed[ADAPTER].parent == engine.served_name


# --- metrics ---------------------------------------------------------------------------------------

def promql_selectors(expr: str) -> list[tuple[str, list[tuple[str, str, str]], set[str]]]:
    """Each ``name{matchers}`` of a PromQL expression, with its matchers (label, op, value) and the
    labels of the `by (...)` groupings around it (approximated by those of the whole expression)."""
    grouped = {label.strip() for clause in re.findall(r"\bby\s*\(([^)]*)\)", expr) for label in clause.split(",")}
    found = []
    for name, matchers in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}", expr):
        parsed = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', matchers)
        found.append((name, parsed, grouped - {""}))
    return found


def consumers(engine: Engine) -> dict[str, str]:
    """Every PromQL expression read from this stack's vLLM: the dashboard's vLLM queries and the
    KEDA trigger's."""
    board = dash.dashboard(engine.config)
    exprs = {f"dashboard {p['title']} {t['refId']}": t["expr"]
             for p in board["panels"] for t in p.get("targets", ()) if t["refId"].startswith("vllm-")}  # rows have none
    scaled = only(engine.objects, "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    exprs["keda trigger"] = trigger["metadata"]["query"]
    return exprs


def test_every_series_the_dashboard_and_keda_read_is_in_the_real_metrics(engine):
    api = client(engine)
    api.chat.completions.create(model=engine.served_name, messages=PROMPT, max_tokens=4)
    # The ServiceMonitor scrapes the Service's port (the server's http port) at its path.
    # (The model's: with metrics on, the gateway has a ServiceMonitor of its own.)
    (monitor,) = [o for o in engine.objects if o["kind"] == "ServiceMonitor" and "gateway" not in o["metadata"]["name"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    status, text = engine.get(endpoint["path"])
    assert status == 200
    exported = parse_exposition(text)
    queries = consumers(engine)
    assert len(queries) >= 12
    checked = 0
    for where, expr in queries.items():
        selectors = promql_selectors(expr)
        assert selectors, (where, expr)
        for name, matchers, grouped in selectors:
            assert name in exported, f"{where}: {name} is not in vLLM {engine.line}'s /metrics"
            samples = exported[name]
            for label, op, value in matchers:
                if label in TARGET_LABELS:
                    continue
                assert op == "=", (where, label, op)
                assert any(s.get(label) == value for s in samples), \
                    f"{where}: no {name} sample with {label}={value!r} (have {samples[:3]})"
            for label in grouped - TARGET_LABELS:
                assert all(label in s for s in samples), f"{where}: {name} has no label {label}"
            checked += 1
    assert checked >= len(queries)


# --- shutdown: last (stops_engine), it stops this line's server ---------------------------------------------------

def _read(stream, seen: list, outcome: dict) -> None:
    try:
        for chunk in stream:
            seen.append((time.monotonic(), chunk))
        outcome["end"] = "complete"
    except Exception as error:  # noqa: BLE001 - which error a cut stream raises is the finding
        outcome["end"] = f"{type(error).__name__}: {error}"


def _stream(engine: Engine, tokens: int):
    seen, outcome = [], {}
    stream = client(engine).chat.completions.create(
        model=engine.served_name, messages=PROMPT, max_tokens=tokens, temperature=0, stream=True,
        extra_body={"ignore_eos": True})
    reader = threading.Thread(target=_read, args=(stream, seen, outcome), daemon=True)
    reader.start()
    return reader, seen, outcome


# How a stream still running at SIGTERM ends varies from run to run. Seen: the server cancels its
# HTTP task and waits for connections to close while the stream gets no more tokens, until the
# kubelet's SIGKILL at the grace's end cuts it (the client: a connection error; 0.11 every run,
# 0.32 once); 0.32 exiting 0 within 2 s, the stream ending with an in-band SSE error event (the
# SDK raises APIError) or closed as if complete, with no finish_reason (truncated, and the SDK
# cannot tell). Never a hang, never the whole answer: what the test pins is that the stream has
# ended by the grace's end.
CUT_STREAM = ("APIConnectionError", "APIError", "complete")


@pytest.mark.stops_engine
def test_zz_termination_with_the_rendered_prestop_and_grace(engine):
    """The kubelet's sequence with the rendered lifecycle: the preStop sleep runs while the server
    still serves (the router stops sending meanwhile), then SIGTERM to PID 1, then SIGKILL at the
    grace's end. A stream admitted when termination starts and shorter than the sleep completes
    whole; after SIGTERM the server takes no new connection; a stream still running then ends
    for the client (an error, never a hang) by the grace's end. The 120 s sleep is not waited
    out: the short stream's end is asserted to fall inside it."""
    sleep = engine.server["lifecycle"]["preStop"]["sleep"]["seconds"]
    left = engine.pod["terminationGracePeriodSeconds"] - sleep
    assert sleep > 0 and left > 0
    long_reader, long_seen, long_outcome = _stream(engine, 1500)
    began = time.monotonic()  # termination starts: the preStop sleep runs from here
    short_reader, short_seen, short_outcome = _stream(engine, 16)
    short_reader.join(timeout=sleep)
    assert short_outcome.get("end") == "complete", short_outcome
    assert short_seen[-1][0] - began < sleep
    finished = [c.choices[0].finish_reason for _, c in short_seen if c.choices and c.choices[0].finish_reason]
    assert finished == ["length"]
    assert long_seen and "end" not in long_outcome, "the long stream should still run at SIGTERM"
    engine.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    time.sleep(1)
    with pytest.raises(openai.APIConnectionError):
        client(engine).models.list()
    try:
        engine.process.wait(timeout=left)
        ended = f"exited {engine.process.returncode} after {time.monotonic() - signalled:.1f}s"
    except subprocess.TimeoutExpired:
        os.killpg(engine.process.pid, signal.SIGKILL)  # the kubelet at the grace's end
        engine.process.wait(timeout=30)
        ended = f"killed at the grace's end ({left}s after SIGTERM)"
    long_reader.join(timeout=10)
    assert not long_reader.is_alive(), "the client still waits on a stream no server serves"
    after = sum(1 for t, _ in long_seen if t > signalled)
    reasons = [c.choices[0].finish_reason for _, c in long_seen if c.choices and c.choices[0].finish_reason]
    print(f"vLLM {engine.line}: {ended}; the stream running at SIGTERM got {after} chunks after it, "
          f"then: {long_outcome['end']} (finish reasons: {reasons})")
    assert long_outcome["end"].startswith(CUT_STREAM), (ended, long_outcome)
    assert len(long_seen) < 1500, "the long stream cannot have finished within the grace"
