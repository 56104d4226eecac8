"""A loopback HTTP relay that flips one byte in the body of the store's answers to GETs of one key:
the fault "a byte went bad on the way" (a faulty NIC, proxy or disk cache), same size, so only a
hash can tell. Plain HTTP/1.1 both ways (the store speaks it on loopback); answers on one
connection come in the order of its requests (Go's client does not pipeline), so the relay pairs
each answer with the request line that asked for it.
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from typing import Optional

from tests.support.relay import LoopbackRelay, shut


class CorruptProxy(LoopbackRelay):
    def __init__(self, upstream_port: int, key: str, times: Optional[int] = None):
        """Flip the middle byte of the body of every GET whose path ends with ``key`` (ranged GETs
        included: the middle of the range), at most ``times`` times (None: always)."""
        self.key = key.encode()
        self.left = times
        self.flips = 0
        self._lock = threading.Lock()
        super().__init__(upstream_port)

    def _directions(self, client: socket.socket, upstream: socket.socket) -> tuple:
        asked: deque[tuple[bytes, bool]] = deque()  # per request on this connection: (method, flip its answer?)
        return ((self._up, (client, upstream, asked)), (self._down, (upstream, client, asked)))

    def _up(self, client: socket.socket, upstream: socket.socket, asked: deque) -> None:
        try:
            while data := client.recv(65536):
                if data[:4] in (b"GET ", b"HEAD", b"PUT ", b"POST"):
                    method, target = data.split(b" ", 2)[:2]
                    asked.append((method, method == b"GET" and target.split(b"?", 1)[0].endswith(self.key)))
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            shut(client, upstream)

    def _flip_now(self) -> bool:
        with self._lock:
            if self.left is not None and self.left <= 0:
                return False
            if self.left is not None:
                self.left -= 1
            self.flips += 1
            return True

    def _down(self, upstream: socket.socket, client: socket.socket, asked: deque) -> None:
        head = b""
        body_left = 0  # bytes of the current answer's body still to relay
        flip_at: Optional[int] = None  # body bytes to relay before the one to flip
        framed = True  # False after a chunked answer: relay the rest of the connection as is
        try:
            while data := upstream.recv(65536):
                out = bytearray()
                while data and framed:
                    if body_left == 0:  # in an answer's head
                        head += data
                        end = head.find(b"\r\n\r\n")
                        if end < 0:
                            data = b""
                            continue
                        answer, data, head = head[:end + 4], head[end + 4:], b""
                        out += answer
                        fields = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
                                  for line in answer.split(b"\r\n")[1:] if b":" in line}
                        method, flip = asked.popleft() if asked else (b"GET", False)
                        if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
                            framed = False
                            continue
                        body_left = 0 if method == b"HEAD" else int(fields.get(b"content-length", b"0"))
                        flip_at = body_left // 2 if flip and body_left and self._flip_now() else None
                        continue
                    chunk, data = bytearray(data[:body_left]), data[body_left:]
                    if flip_at is not None and flip_at < len(chunk):
                        chunk[flip_at] ^= 0xFF
                        flip_at = None
                    elif flip_at is not None:
                        flip_at -= len(chunk)
                    body_left -= len(chunk)
                    out += chunk
                out += data
                client.sendall(bytes(out))
        except OSError:
            pass
        finally:
            shut(client, upstream)
