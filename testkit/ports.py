"""A free loopback port for a server a test starts as a separate process.

Not port 0's pick: the kernel hands that out from its ephemeral range
(net.ipv4.ip_local_port_range, 32768-60999 by default), which every outgoing connection on the
machine draws from too. Between this check and the server's own bind, an outgoing connection (the
cluster tier's Pulumi engines, providers and API clients open them all the time) could take the
port: the backend router once failed "Address already in use" in the cluster tier that way. A
random port below that range is taken only by another listener, and the bind check here sees one.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_random = random.SystemRandom()


def ephemeral_start() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A loopback port nothing listens on (TCP, or UDP with ``socket.SOCK_DGRAM``), below the
    ephemeral range when there is room there, else port 0's pick."""
    top = ephemeral_start() - 1
    for _ in range(64 if top > LOWEST else 0):
        port = _random.randint(LOWEST, top)
        with socket.socket(socket.AF_INET, kind) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def host_ipv4() -> str:
    """This machine's primary non-loopback IPv4 (no packet is sent: a UDP connect picks the route):
    where a process the simulated cluster's objects name (a pod IP, a URL in a ScaledObject) is
    reached, since the API server refuses loopback endpoint addresses and loopback would mean the
    pod itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("10.255.255.255", 1))
        address = sock.getsockname()[0]
    if address.startswith("127."):
        raise RuntimeError("no non-loopback IPv4 on this machine")
    return address
