"""A re-created router Service is followed (issue 29, item 6): the gateway resolves the router's
name through the pod's DNS servers at request time (valid=5s), not once at start.

On the real nginx the gateway tests use (1.26.3 + njs 0.8.9), in front of two stand-in routers
on 127.0.0.1 and 127.0.0.2 (same port), with a DNS responder on loopback as the cluster DNS:
the router's name first answers the first router's address, then the second's, as a Service
deleted and re-created with a new ClusterIP does. And the start command that writes the pod's
nameservers for nginx is run on a resolv.conf as the kubelet writes it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from components.compile.gateway.nginx import GatewaySettings
from components.compile.gateway.resolver import RESOLVER_FILE, RESOLVER_VALID, resolver_line, write_resolver_script
from testkit.dns_responder import DnsResponder
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway, free_port

MODEL = "qwen-small"
ROUTER = "llm-router.llm-serving.svc.cluster.local"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
VALID = float(RESOLVER_VALID.removesuffix("s"))
# nginx keeps time in whole seconds and an answer stays cached while `valid >= now`: an answer
# cached at t (clock floor(t)) is used until floor(t) + valid + 1, i.e. up to one second past
# t + valid. Half a second more for a worker's clock, updated only when it wakes.
EXPIRED_WITHIN = VALID + 1.5


def chat(base: str) -> int:
    request = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(CHAT).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def answered_by(second: FakeRouter, base: str, within: float) -> float | None:
    """Seconds until a request reaches ``second`` (requests every 0.2 s), or None."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        before = len(second.requests)
        assert chat(base) == 200
        if len(second.requests) > before:
            return time.monotonic() - start
        time.sleep(0.2)
    return None


def test_a_re_created_router_service_is_followed_within_the_valid_time():
    port = free_port()
    with FakeRouter(models=(MODEL,), host="127.0.0.1", port=port) as first, \
            FakeRouter(models=(MODEL,), host="127.0.0.2", port=port) as second, \
            DnsResponder({ROUTER: "127.0.0.1"}) as dns:
        settings = GatewaySettings(upstream=f"{ROUTER}:{port}", models=(MODEL,))
        with Gateway(settings, dns=dns.address) as gw:
            for _ in range(3):
                assert chat(gw.base) == 200
            assert len(first.requests) == 3 and not second.requests
            assert (ROUTER, 1) in dns.queries  # nginx asked the pod's DNS, not the system resolver
            # The Service is deleted and re-created: its name now answers another ClusterIP.
            dns.records[ROUTER] = "127.0.0.2"
            moved = time.monotonic()
            followed = answered_by(second, gw.base, within=VALID + 3)
            assert followed is not None, (
                f"the gateway kept calling the old address for {VALID + 3:.0f} s after the name moved")
            assert followed <= EXPIRED_WITHIN, followed
            # Once every worker's cached answer has expired, every request reaches the new Service
            # (each worker process resolves on its own).
            time.sleep(max(0.0, moved + EXPIRED_WITHIN - time.monotonic()))
            at_first = len(first.requests)
            for _ in range(6):
                assert chat(gw.base) == 200
            assert len(first.requests) == at_first


def test_the_gateway_starts_before_the_router_name_exists_and_answers_503_meanwhile():
    """Resolved at start, a missing name kept nginx from starting (a crash-looping gateway until
    the router Service existed); resolved per request, the gateway starts and answers 503."""
    port = free_port()
    with FakeRouter(models=(MODEL,), host="127.0.0.1", port=port) as router, DnsResponder({}) as dns:
        settings = GatewaySettings(upstream=f"{ROUTER}:{port}", models=(MODEL,), retry_after_seconds=3)
        with Gateway(settings, dns=dns.address) as gw:
            assert chat(gw.base) == 503 and not router.requests
            dns.records[ROUTER] = "127.0.0.1"
            deadline = time.monotonic() + VALID + 3
            while chat(gw.base) != 200:
                assert time.monotonic() < deadline, "the router's name was not picked up"
                time.sleep(0.2)
            assert router.requests


# --- the start command: the pod's resolv.conf -> resolver.conf --------------------------------

KUBELET_RESOLV_CONF = """# written by the kubelet (dnsPolicy: ClusterFirst)
search llm-serving.svc.cluster.local svc.cluster.local cluster.local
nameserver 10.96.0.10
nameserver fd00:10:96::a
options ndots:5"""  # no final newline: the last line still counts


def shells() -> list[str]:
    found = [shell for shell in ("sh", "dash", "bash") if shutil.which(shell)]
    if shutil.which("busybox"):
        found.append("busybox sh")
    return list(dict.fromkeys(found))


@pytest.mark.parametrize("shell", shells())
def test_the_start_command_writes_the_pods_nameservers(tmp_path: Path, shell: str):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(KUBELET_RESOLV_CONF)
    script = write_resolver_script(str(tmp_path), resolv_conf=str(resolv))
    done = subprocess.run([*shell.split(), "-c", script], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / RESOLVER_FILE).read_text()
    assert written == resolver_line(["10.96.0.10", "[fd00:10:96::a]"]) == \
        "resolver 10.96.0.10 [fd00:10:96::a] valid=5s;\n"


@pytest.mark.parametrize("shell", shells())
def test_without_a_nameserver_the_container_does_not_start(tmp_path: Path, shell: str):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("search cluster.local\n")
    done = subprocess.run([*shell.split(), "-c", write_resolver_script(str(tmp_path), resolv_conf=str(resolv))],
                          capture_output=True, text=True, timeout=10)
    assert done.returncode == 1 and "no nameserver" in done.stderr
    assert not (tmp_path / RESOLVER_FILE).exists()
