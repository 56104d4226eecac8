"""What reaching the router by name costs the gateway, from one run on loopback (bounded loops).

    .venv/bin/python bench/gateway_resolver.py [--pairs 1500]

Two gateways rendered from the same settings in front of one stand-in router
(testkit/fake_router.py): one with the router as an IP literal (nginx never asks DNS), one
with the router's FQDN, resolved per request through nginx's resolver (valid=5s) against a DNS
responder on loopback (testkit/dns_responder.py), as the shipped config does. Non-streaming
chat requests alternate between the two so load on this shared machine hits both alike; the
DNS queries the named side made are counted. No keepalive pool is compared: the router hop is
HTTP/1.0, one connection per request, on both sides and before the change. Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from components.compile.gateway.nginx import GatewaySettings
from testkit.dns_responder import DnsResponder
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway

NAME = "llm-router.llm-serving.svc.cluster.local"
MODEL = "qwen-small"
CHAT = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}).encode()


def once(base: str) -> float:
    start = time.perf_counter()
    request = urllib.request.Request(base + "/v1/chat/completions", data=CHAT,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        reply.read()
        if reply.status != 200:
            raise RuntimeError(f"status {reply.status}")
    return (time.perf_counter() - start) * 1000


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    return (f"median {statistics.median(ordered):.2f} ms, p90 {ordered[int(0.9 * len(ordered))]:.2f} ms, "
            f"p99 {ordered[int(0.99 * len(ordered))]:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1500)
    args = parser.parse_args()
    with FakeRouter(models=(MODEL,)) as router, DnsResponder({NAME: "127.0.0.1"}) as dns:
        by_ip = Gateway(GatewaySettings(upstream=f"127.0.0.1:{router.port}", models=(MODEL,)), dns=dns.address)
        by_name = Gateway(GatewaySettings(upstream=f"{NAME}:{router.port}", models=(MODEL,)), dns=dns.address)
        try:
            by_ip.start()
            by_name.start()
            for gateway in (by_ip, by_name):
                for _ in range(20):
                    once(gateway.base)
            times: dict[str, list[float]] = {"ip": [], "name": []}
            started, queries = time.monotonic(), len(dns.queries)
            for _ in range(args.pairs):
                times["ip"].append(once(by_ip.base))
                times["name"].append(once(by_name.base))
            span = time.monotonic() - started
            print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.pairs} alternating pairs")
            print(f"router by IP literal:         {summary(times['ip'])}")
            print(f"router by name (resolver):    {summary(times['name'])}")
            print(f"DNS queries of the named side: {len(dns.queries) - queries} in {span:.1f} s "
                  "(A and AAAA, per worker, per valid= period)")
        finally:
            by_ip.stop()
            by_name.stop()


if __name__ == "__main__":
    main()
