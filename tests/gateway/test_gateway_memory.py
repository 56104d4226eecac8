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
from components.config.gateway import (
    BODY_FACTOR,
    FOLD_BODY_COPIES,
    FOLD_BODY_EXTRA_BYTES,
    FOLD_BYTES_PER_STREAM_BYTE,
    REQUEST_BYTES,
)
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
        # Each tenant's share of the replica's folds is `answers` (the budget over the tenants).
        settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL,), keys_file="keys",
                                   tenants=(Tenant("team-a", None, None, None, 0), Tenant("team-s", None, None, None, 0)),
                                   max_response_bytes=MAX_RESPONSE, in_flight_folds=2 * answers)
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


# --- the bound, by construction (issue 39) ---------------------------------------------------------
# What one tenant can make a replica hold, within its limits, is its share of the replica's
# in-flight budgets (gateway.js, admitRequest): requests, body bytes, folds. Here a tenant spends
# all of its share at once in the costliest ways (bodies made of a million small JSON values,
# slow uploads of the largest body, a maximal non-streaming answer, as many requests as it can),
# while another tenant streams and folds beside it. nginx's memory (from /proc) must stay under
# the formula `validate` checks (components/config/gateway.py), /tmp under its part, and the other
# tenant must be served whole.
BOUND_BODY = 4 * 1024 * 1024
BOUND_RESPONSE = 1024 * 1024
BOUND_REQUESTS = 32
BOUND_BODY_BYTES = 32 * 1024 * 1024
BOUND_FOLDS = 2
WORDS = 4000  # token deltas: ~0.7 MB of stream, under BOUND_RESPONSE


def scratch_bytes(directory: Path) -> int:
    total = 0
    for path in directory.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except OSError:
            pass
    return total


def dense_body() -> bytes:
    """A streaming call whose body is ~4 MiB of empty objects: the most JSON values a body holds."""
    head = b'{"model":"qwen-small","stream":true,"messages":[{"role":"user","content":"hi"}],"user_data":['
    count = (BOUND_BODY - len(head) - 8) // 3
    return head + b",".join([b"{}"] * count) + b"]}"


def send(port: int, key: str, body: bytes, declared: int | None = None) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=30)
    client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                   b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: %d\r\n\r\n"
                   % (len(body) if declared is None else declared))
    try:
        client.sendall(body)
    except OSError:
        pass  # refused before its body: nginx answered and stopped reading
    return client


def status_of(client: socket.socket) -> int:
    try:
        head = client.recv(65536)
    except OSError as error:
        return -error.errno
    return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0


def test_a_tenant_spending_its_whole_share_keeps_the_replica_under_its_bound(tmp_path):
    keys = f"{hashlib.sha256(b'sk-a').hexdigest()} team-a\n{hashlib.sha256(b'sk-s').hexdigest()} team-s\n"
    with FakeRouter(models=(MODEL,), words=(" w",) * WORDS, delay=0.001) as fake:
        settings = GatewaySettings(upstream=f"127.0.0.1:{fake.port}", models=(MODEL,), keys_file="keys",
                                   tenants=(Tenant("team-a", None, None, None, 0), Tenant("team-s", None, None, None, 0)),
                                   max_body_bytes=BOUND_BODY, max_response_bytes=BOUND_RESPONSE,
                                   in_flight_requests=BOUND_REQUESTS, in_flight_body_bytes=BOUND_BODY_BYTES,
                                   in_flight_folds=BOUND_FOLDS)
        with Gateway(settings, keys=keys) as gw:
            time.sleep(0.5)
            before = rss_bytes(gw.proc.pid)
            stop, peak, disk = [], [before], [0]

            def sample() -> None:
                while not stop:
                    peak[0] = max(peak[0], rss_bytes(gw.proc.pid))
                    disk[0] = max(disk[0], scratch_bytes(gw.dir / "tmp"))
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample)
            sampler.start()
            victim: list = []

            def victim_call(stream: bool) -> None:
                conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
                conn.request("POST", "/v1/chat/completions",
                             json.dumps({"model": MODEL, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}),
                             {"Content-Type": "application/json", "Authorization": "Bearer sk-s"})
                reply = conn.getresponse()
                victim.append((stream, reply.status, reply.read()))

            try:
                # The attacker: a maximal fold first, then two bodies of small values, then slow
                # uploads of the largest body (all but its last byte), then plain streams: as
                # many of each as its share admits.
                fold = send(gw.port, "sk-a", json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}).encode())
                extra_fold = send(gw.port, "sk-a", json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "y"}]}).encode())
                dense = [send(gw.port, "sk-a", dense_body()) for _ in range(2)]
                uploads = [send(gw.port, "sk-a", b" " * (BOUND_BODY - 1), declared=BOUND_BODY) for _ in range(20)]
                small = json.dumps({"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "z"}]}).encode()
                plain = [send(gw.port, "sk-a", small) for _ in range(BOUND_REQUESTS)]
                threads = [threading.Thread(target=victim_call, args=(stream,)) for stream in (True, True, True, False)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
                # The two folds race for the tenant's one: whichever's body is read first gets it.
                folds = sorted(status_of(c) for c in (fold, extra_fold))
                refused = [status_of(c) for c in uploads[-5:] + plain[-5:]]
                answered = [status_of(c) for c in dense]
            finally:
                stop.append(True)
                sampler.join()
            for c in [fold, extra_fold, *dense, *uploads, *plain]:
                c.close()
    growth = peak[0] - before
    # The formula of components/config/gateway.py (memory_bound) without nginx's own base.
    bound = (BOUND_REQUESTS * REQUEST_BYTES + BODY_FACTOR * BOUND_BODY_BYTES
             + BOUND_FOLDS * (FOLD_BYTES_PER_STREAM_BYTE * BOUND_RESPONSE + FOLD_BODY_COPIES * BOUND_BODY))
    disk_bound = BOUND_BODY_BYTES + BOUND_FOLDS * (BOUND_BODY + FOLD_BODY_EXTRA_BYTES)
    print(f"one tenant's whole share at once: nginx RSS {before / 2**20:.1f} -> peak {peak[0] / 2**20:.1f} MiB "
          f"(+{growth / 2**20:.1f}; bound {bound / 2**20:.1f}), /tmp peak {disk[0] / 2**20:.1f} MiB "
          f"(bound {disk_bound / 2**20:.1f}); refused {refused}, answered {answered}, folds {folds}")
    # The other tenant, beside it, was served whole: three streams and a folded answer.
    assert sorted(status for _, status, _ in victim) == [200] * 4, [(s, st, b[:200]) for s, st, b in victim]
    for stream, _, text in victim:
        if stream:
            assert text.decode().count("data: ") == WORDS + 3 and text.rstrip().endswith(b"data: [DONE]")
        else:
            assert len(json.loads(text)["choices"][0]["message"]["content"]) == 2 * WORDS
    # The attacker got its share and was refused beyond it, before its bodies were read.
    assert answered == [200, 200] and folds == [200, 429], (answered, folds)
    assert set(refused) == {429}, refused
    assert growth < bound and disk[0] <= disk_bound, (growth, bound, disk[0], disk_bound)
