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
import time
from pathlib import Path

from components.compile.gateway.nginx import GatewaySettings, Tenant
from tests.gateway.fake_router import FakeRouter
from tests.gateway.nginx_kit import Gateway

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
