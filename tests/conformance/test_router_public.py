"""The public Stargate build (NVIDIA/nvcf@fadc0f8, Stargate 0.4.0) run with OUR render.

Router and pylons start with the arguments ``components.compile`` renders for
``router.release: public-0.4`` (rewritten only where a pod's addresses and paths differ from
loopback: testkit/stargate.py's docstring lists each rewrite), beside fake OpenAI engines. What is proven here
is what the binaries do, not what a chart says.
"""

from __future__ import annotations

import http.client as http_client
import re
import subprocess
import threading
import time

import pytest

from components.config.router_release import PUBLIC_BACKEND_FLAGS, PUBLIC_PYLON_FLAGS, PUBLIC_ROUTER_FLAGS
from testkit.stargate import chat_body, contract_headers, http, stack_config

# clap hides this one from --help (pylon main.rs `hide = true`).
HIDDEN = {"--benchmark-pin-input-tps"}


@pytest.mark.parametrize("binary, known", [
    ("stargate", PUBLIC_ROUTER_FLAGS), ("stargate-k8s-router", PUBLIC_BACKEND_FLAGS), ("pylon", PUBLIC_PYLON_FLAGS),
])
def test_the_public_line_flag_lists_are_the_binaries(stargate_bin, binary, known):
    """router_release's flag sets (what validate checks `args` against) are the built CLI's."""
    shown = subprocess.run([stargate_bin / binary, "--help"], capture_output=True, text=True, timeout=30).stdout
    flags = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]+)", shown)) - {"--help", "--version"}
    assert flags == set(known) - HIDDEN


def test_the_chart_line_render_is_refused_by_the_public_build(stargate_bin, tmp_path):
    """Why the line is a setting: chart 0.16.2's flags stop the public router at startup."""
    from testkit.stargate import Localizer, RouterPorts, rendered

    render = rendered(stack_config(release="chart-0.16"))
    ports = RouterPorts()
    args = Localizer("llm-router-0", "llm-serving", {})(render.router, {
        "--listen-addr": f"127.0.0.1:{ports.grpc}", "--http-listen-addr": f"127.0.0.1:{ports.http}",
        "--advertise-addr": f"127.0.0.1:{ports.grpc}", "--metrics-port": str(ports.metrics),
        "--reverse-tunnel-listen-addr": f"127.0.0.1:{ports.quic}"})
    result = subprocess.run([stargate_bin / "stargate", *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "unexpected argument '--readiness-warmup-ms'" in result.stderr


def test_every_rendered_flag_is_accepted_and_pylon_registers(router_stack):
    stack = router_stack()
    assert stack.router.alive and all(p.alive for p in stack.pylons)
    for rendered_args, ran in ((stack.render.router, stack.router.argv[1:]),
                               (stack.render.pylon[stack.model], stack.pylons[0].argv[1:])):
        assert {a.split("=", 1)[0] for a in rendered_args} <= {a.split("=", 1)[0] for a in ran}
    models = stack.get("/v1/models")
    assert models.status == 200 and models.json == {"model_ids": [stack.model]}
    assert stack.active_servers() == 1


def test_a_contract_request_gets_the_engine_stream(router_stack):
    stack = router_stack()
    headers = contract_headers(stack.model, input_tokens=3, request_id="conformance-1")
    reply = stack.post("/v1/chat/completions", chat_body("hello there", stream=True), headers)
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"].startswith("text/event-stream")
    data = reply.sse_data()
    assert data[-1] == "[DONE]"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in map(_json, data[:-1]) if c["choices"]) \
        == "Hello from engine-0"
    [seen] = stack.engines[0].user_requests("/v1/chat/completions")
    assert seen.headers["x-request-id"] == "conformance-1" and seen.json["stream"] is True
    assert seen.json["messages"] == [{"role": "user", "content": "hello there"}]


def test_what_a_gateway_must_add(router_stack):
    """The router's own answers to a plain OpenAI client (the gateway's reason to exist)."""
    stack = router_stack()
    no_headers = http("POST", f"{stack.http_url}/v1/chat/completions", chat_body(stream=True))
    assert no_headers.status == 400
    not_streaming = stack.post("/v1/chat/completions", chat_body(stream=False))
    assert not_streaming.status == 400 and b"stream=true" in not_streaming.body
    assert stack.post("/v1/completions", {"model": stack.model, "prompt": "hi"}).status == 404
    embeddings = stack.post("/v1/embeddings", {"model": stack.model, "input": "hi"})
    assert embeddings.status == 200 and embeddings.json["object"] == "list"
    unknown = stack.post("/v1/chat/completions", chat_body(stream=True), contract_headers("no-such-model"))
    assert unknown.status == 404 and unknown.headers.get("x-stargate-error-code") == "no_eligible_candidates"


def test_responses_and_models_pass_through(router_stack):
    """The Responses event stream reaches the client as the engine sent it."""
    stack = router_stack()
    reply = stack.post("/v1/responses", {"model": stack.model, "input": "hi", "stream": True})
    assert reply.status == 200, reply.body
    events = [line.split(":", 1)[1].strip() for line in reply.body.decode().splitlines() if line.startswith("event:")]
    assert events[0] == "response.created" and events[-1] == "response.completed"
    assert stack.post("/v1/responses", {"model": stack.model, "input": "hi"}).status == 400  # not streaming
    [seen] = stack.engines[0].user_requests("/v1/responses")
    assert seen.json == {"model": stack.model, "input": "hi", "stream": True}


def _json(text: str):
    import json

    return json.loads(text)


class Load:
    """A bounded client: ``workers`` threads each sending streaming requests back to back until
    stopped (at most ``limit`` each); every outcome recorded with its start and end time."""

    def __init__(self, stack, workers: int = 2, limit: int = 400):
        self.stack, self.limit = stack, limit
        self.results: list[tuple[float, float, int]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(workers)]

    def run(self) -> None:
        for _ in range(self.limit):
            if self.stop.is_set():
                return
            started = time.monotonic()
            try:
                reply = self.stack.post("/v1/chat/completions", chat_body(stream=True), timeout_s=15)
                status = reply.status
                if status != 200:
                    self.errors.append(f"{status} {reply.headers.get('x-stargate-error-code')} {reply.body[:200]!r}")
            except (OSError, http_client.HTTPException) as error:  # refused, reset, or a stream cut short
                status = -1
                self.errors.append(repr(error))
            with self.lock:
                self.results.append((started, time.monotonic(), status))

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def failed(self) -> list[tuple[float, float, int]]:
        return [r for r in self.results if r[2] != 200]


def test_a_pylon_restart_fails_only_requests_in_flight(router_stack):
    """Two engine pods; pylon 0 restarts under load: requests routed to it while it was down or
    in flight may fail, and nothing else does: the router sends the rest to pylon 1 and takes
    pylon 0 back after it re-registers."""
    stack = router_stack(engines=2)
    for engine in stack.engines:
        engine.chunk_delay_s = 0.05  # streams last ~0.3 s, so some are in flight at the kill
    with Load(stack) as load:
        time.sleep(2)
        killed_at = time.monotonic()
        stack.restart_pylon(0)
        stack.wait_registered(2)
        back_at = time.monotonic()
        time.sleep(2)
    assert len(load.results) > 10
    failed = load.failed()
    # Only requests that started before pylon 0 was registered again, and ended after the kill.
    assert [r for r in failed if not (r[0] < back_at and r[1] >= killed_at)] == []
    in_flight = [r for r in load.results if r[0] < killed_at <= r[1]]
    print(f"pylon restart: {len(failed)} failed of {len(load.results)}; {len(in_flight)} in flight at the kill; "
          f"re-registered after {back_at - killed_at:.1f}s")
    assert len(failed) <= len(in_flight) + 2 * 2  # + at most one per worker routed to it before eviction


def test_a_router_restart_fails_only_requests_in_flight(router_stack):
    """The router restarts (one replica: while it is down nothing can serve); requests in flight
    may fail, and every request after it is back and the pylon has re-registered succeeds."""
    stack = router_stack()
    stack.engines[0].chunk_delay_s = 0.05
    with Load(stack) as before:
        time.sleep(1.5)
        before.stop.set()  # no new request while the only router is down; those running stay
        killed_at = time.monotonic()
        stack.restart_router()
    stack.wait_registered(1)
    back_at = time.monotonic()
    # In flight: not finished when the load stopped (each worker has at most one, which may have
    # been sent just as the router began draining).
    in_flight = [r for r in before.results if r[1] >= killed_at]
    failed = before.failed()
    assert len(before.results) > 3 and len(in_flight) <= len(before.threads)
    assert [r for r in failed if r not in in_flight] == [], (killed_at, before.errors)
    with Load(stack) as after:
        time.sleep(2)
    assert after.results and after.failed() == [], after.errors
    print(f"router restart: {len(failed)} failed ({len(in_flight)} in flight at the kill); "
          f"pylon re-registered {back_at - killed_at:.1f}s after the kill; {len(after.results)} after, none failed")


def test_the_local_stack_runs_on_the_public_line(stargate_bin, tmp_path):
    """stacks/Pulumi.local.yaml as written (router.release: public-0.4, the build its image is)."""
    from components.config import load_stack_config, read_stack_file
    from testkit.stargate import REPO, RouterStack

    raw = read_stack_file(REPO / "stacks" / "Pulumi.local.yaml")
    assert raw["router"]["release"] == "public-0.4"
    stack = RouterStack(load_stack_config(raw), stargate_bin, tmp_path / "local").start()
    try:
        assert stack.model == "tiny-chat"
        reply = stack.post("/v1/chat/completions", chat_body(stream=True, model="tiny-chat"))
        assert reply.status == 200 and reply.sse_data()[-1] == "[DONE]"
    finally:
        stack.stop()


def test_tls_from_a_ca_issuer_on_a_single_router(router_stack, tmp_path):
    """One router, no backend router: the router serves the CA-issued leaf for its rendered
    Certificate's names, the pylon verifies it against ca.crt (no --quic-insecure anywhere)."""
    from components.compile.router import compile_router
    from testkit.stargate import make_ca_issued_tls

    tls_config = {"enabled": True, "issuer": {"kind": "ClusterIssuer", "name": "internal-ca"}}
    certificate = compile_router(stack_config({"tls": tls_config})).certificate
    tls = make_ca_issued_tls(tmp_path / "pki", certificate["spec"]["dnsNames"])
    stack = router_stack(router={"tls": tls_config}, tls=tls)
    assert "--quic-insecure" not in stack.render.router + stack.render.pylon[stack.model]
    reply = stack.post("/v1/chat/completions", chat_body(stream=True))
    assert reply.status == 200 and reply.sse_data()[-1] == "[DONE]" and "engine-0" in reply.body.decode()
