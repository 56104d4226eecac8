"""The gateway's memory under abuse, on the real nginx: slow uploads with a valid key that send
all but the last byte of a maximal body, and callers without a key declaring maximal bodies,
held open together, while another tenant streams. nginx's resident memory (master + workers,
from /proc) must stay far below the pod's limit and the stream must arrive whole.

Before bodies went to disk through a small buffer, each held upload cost its whole declared
size (nginx sizes the body buffer from Content-Length up to client_body_buffer_size, which was
maxBodyBytes): the 40 uploads here grew nginx by ~160 MiB; the bound below is 48 MiB.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from components.compile.gateway.nginx import GatewaySettings, Tenant
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway

MODEL = "qwen-small"
MAX_BODY = 4 * 1024 * 1024
SLOW_UPLOADS = 40
UNAUTHENTICATED = 20
GROWTH_BOUND = 48 * 1024 * 1024
POD_LIMIT = 512 * 1024 * 1024


def rss_bytes(master: int) -> int:
    """VmRSS of nginx's master and every process whose parent it is."""
    pids = [master]
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(master):
            pids.append(int(status.parent.name))
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


def held_upload(port: int, auth: bytes) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" + auth
            + b"Content-Length: %d\r\n\r\n" % MAX_BODY)
    client.sendall(head)
    if auth:
        client.sendall(b" " * (MAX_BODY - 1))  # all but the last byte: the body stays open
    return client


def test_slow_uploads_and_unauthenticated_callers_do_not_grow_nginx(tmp_path):
    key = "sk-abuse"
    keys = f"{hashlib.sha256(key.encode()).hexdigest()} team-a\n{hashlib.sha256(b'sk-s').hexdigest()} team-s\n"
    with FakeRouter(models=(MODEL,), words=tuple(f" w{i}" for i in range(12)), delay=0.1) as fake:
        settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL,), keys_file="keys",
                                   tenants=(Tenant("team-a", None, None, None, 0), Tenant("team-s", None, None, None, 0)),
                                   max_body_bytes=MAX_BODY)
        with Gateway(settings, keys=keys) as gw:
            time.sleep(0.5)
            before = rss_bytes(gw.proc.pid)
            stream = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
            stream.request("POST", "/v1/chat/completions",
                           json.dumps({"model": MODEL, "stream": True,
                                       "messages": [{"role": "user", "content": "hi"}]}),
                           {"Content-Type": "application/json", "Authorization": "Bearer sk-s"})
            held = [held_upload(gw.port, f"Authorization: Bearer {key}\r\n".encode()) for _ in range(SLOW_UPLOADS)]
            held += [held_upload(gw.port, b"") for _ in range(UNAUTHENTICATED)]
            time.sleep(1.0)
            during = rss_bytes(gw.proc.pid)
            reply = stream.getresponse()
            text = reply.read().decode()
            for client in held:
                client.close()
    growth = during - before
    print(f"nginx RSS before {before / 2**20:.1f} MiB, with {SLOW_UPLOADS} held uploads of {MAX_BODY} bytes and "
          f"{UNAUTHENTICATED} unauthenticated: {during / 2**20:.1f} MiB (+{growth / 2**20:.1f} MiB)")
    assert growth < GROWTH_BOUND and during < POD_LIMIT, (before, during)
    # The other tenant's stream, open throughout, arrived whole.
    assert reply.status == 200 and text.count("data: ") == 12 + 3 and text.rstrip().endswith("data: [DONE]")


# --- large non-streaming answers --------------------------------------------------------------
# A non-streaming answer is folded in nginx from the event stream. njs's legacy engine (what
# Debian's njs 0.8.9 runs; it is built without QuickJS) frees nothing a request allocates before
# that request ends, so an answer's cost is what its whole stream allocates: measured on this
# nginx, about 8 bytes per stream byte (the event's text, the parsed delta, the joined and the
# serialised answer, nginx's buffers) plus about 2 KiB per event (the parsed chunk objects).
# The bound below is that model with headroom, for N answers held together near
# maxResponseBytes. Before the fold kept deltas as pieces, `content += delta` kept every prefix:
# one answer of 2 MB in 1 KiB deltas grew nginx by 2 GiB (and took 65 s).
PER_STREAM_BYTE = 10
PER_EVENT = 2560
MAX_RESPONSE = 4 * 1024 * 1024


def event_bytes(word: str) -> int:
    chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": MODEL,
             "choices": [{"index": 0, "delta": {"content": word}, "logprobs": None, "finish_reason": None}]}
    return len(f"data: {json.dumps(chunk)}\n\n")


def peak_rss(master: int, stop: list, peak: list) -> None:
    while not stop:
        peak[0] = max(peak[0], rss_bytes(master))
        time.sleep(0.02)


@pytest.mark.parametrize("delta, answers", [(1024, 4), (4, 2)], ids=["1KiB-deltas", "token-deltas"])
def test_large_non_streaming_answers_stay_within_their_bound(delta, answers):
    word = "x" * delta
    events = int(MAX_RESPONSE * 0.9) // event_bytes(word)
    stream_bytes = events * event_bytes(word)
    keys = f"{hashlib.sha256(b'sk-a').hexdigest()} team-a\n{hashlib.sha256(b'sk-s').hexdigest()} team-s\n"
    with FakeRouter(models=(MODEL,), words=(word,) * events) as fake:
        settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL,), keys_file="keys",
                                   tenants=(Tenant("team-a", None, None, None, 0), Tenant("team-s", None, None, None, 0)),
                                   max_response_bytes=MAX_RESPONSE)
        with Gateway(settings, keys=keys) as gw:
            time.sleep(0.5)
            before = rss_bytes(gw.proc.pid)
            stop, peak = [], [before]
            sampler = threading.Thread(target=peak_rss, args=(gw.proc.pid, stop, peak))
            sampler.start()
            results: list = []

            def ask(key: str, stream: bool) -> None:
                conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=120)
                conn.request("POST", "/v1/chat/completions",
                             json.dumps({"model": MODEL, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}),
                             {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
                reply = conn.getresponse()
                results.append((stream, reply.status, reply.read()))

            threads = [threading.Thread(target=ask, args=("sk-a", False)) for _ in range(answers)]
            threads.append(threading.Thread(target=ask, args=("sk-s", True)))
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            stop.append(True)
            sampler.join()
    growth = peak[0] - before
    bound = answers * (PER_STREAM_BYTE * stream_bytes + PER_EVENT * events)
    print(f"{answers} answers of {events} events ({stream_bytes / 2**20:.1f} MiB of stream each, maxResponseBytes "
          f"{MAX_RESPONSE / 2**20:.0f} MiB): nginx RSS {before / 2**20:.1f} -> peak {peak[0] / 2**20:.1f} MiB "
          f"(+{growth / 2**20:.1f}; bound {bound / 2**20:.1f})")
    folded = [json.loads(body) for stream, _, body in results if not stream]
    assert len(folded) == answers and all(status == 200 for _, status, _ in results)
    assert all(len(a["choices"][0]["message"]["content"]) == events * delta for a in folded)
    # The other tenant's stream, beside them, arrived whole.
    (streamed,) = [body.decode() for stream, _, body in results if stream]
    assert streamed.count("data: ") == events + 3 and streamed.rstrip().endswith("data: [DONE]")
    assert growth < bound and peak[0] < POD_LIMIT, (before, peak[0], bound)
