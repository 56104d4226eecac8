"""A tiny authoritative DNS server on loopback (stdlib, UDP): the cluster DNS for one test.

It answers A queries for the names in ``records`` (changeable while it runs, as a Service's
record changes when the Service is re-created), an empty NOERROR for their other types (nginx's
resolver also asks AAAA), and NXDOMAIN for every other name. Each query is recorded."""

from __future__ import annotations

import socket
import struct
import threading

A, CLASS_IN = 1, 1
NOERROR, NXDOMAIN = 0, 3


def _question(packet: bytes) -> tuple[str, int, int]:
    """(name, qtype, end offset of the question) of a query's first question."""
    labels, offset = [], 12
    while packet[offset]:
        length = packet[offset]
        labels.append(packet[offset + 1:offset + 1 + length].decode("ascii").lower())
        offset += 1 + length
    qtype, _ = struct.unpack("!HH", packet[offset + 1:offset + 5])
    return ".".join(labels), qtype, offset + 5


class DnsResponder:
    def __init__(self, records: dict[str, str], ttl: int = 300):
        self.records = dict(records)
        self.ttl = ttl  # long on purpose: nginx's `valid=` must be what bounds its cache
        self.queries: list[tuple[str, int]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)  # the loop checks whether to stop
        self.stopped = threading.Event()
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _answer(self, packet: bytes) -> bytes:
        (ident,) = struct.unpack("!H", packet[:2])
        name, qtype, end = _question(packet)
        self.queries.append((name, qtype))
        address = self.records.get(name)
        answers = b""
        if address is not None and qtype == A:
            # The name as a pointer to the question (offset 12), then type, class, TTL, the address.
            answers = struct.pack("!HHHIH", 0xC00C, A, CLASS_IN, self.ttl, 4) + socket.inet_aton(address)
        code = NXDOMAIN if address is None else NOERROR
        flags = 0x8400 | code  # a response, authoritative
        header = struct.pack("!HHHHHH", ident, flags, 1, 1 if answers else 0, 0, 0)
        return header + packet[12:end] + answers

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                packet, peer = self.sock.recvfrom(512)
            except TimeoutError:
                continue
            try:
                self.sock.sendto(self._answer(packet), peer)
            except (IndexError, struct.error, UnicodeDecodeError):
                continue  # not a query this responder reads

    def __enter__(self) -> DnsResponder:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join(2)
        self.sock.close()
