"""A loopback TCP relay that cuts one connection mid-response: the fault "the connection to the
store dropped while a big object was coming". Plain bytes both ways (the store speaks HTTP on
loopback), so the relay also sees what the client asked after the cut (a ranged re-read)."""

from __future__ import annotations

import socket
import threading

from tests.support.relay import LoopbackRelay, shut


class CutProxy(LoopbackRelay):
    def __init__(self, upstream_port: int, cut_after_bytes: int):
        self.cut_after = cut_after_bytes
        self.cuts = 0
        self.requests: list[bytes] = []  # the head of every request the client sent
        self._lock = threading.Lock()
        self._armed = True
        super().__init__(upstream_port)

    def _up(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                if data[:4] in (b"GET ", b"HEAD", b"PUT ", b"POST"):
                    with self._lock:
                        self.requests.append(data.split(b"\r\n\r\n", 1)[0])
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            shut(client, upstream)

    def _down(self, upstream: socket.socket, client: socket.socket) -> None:
        sent = 0
        try:
            while data := upstream.recv(65536):
                sent += len(data)
                with self._lock:
                    cut = self._armed and sent > self.cut_after
                    if cut:
                        self._armed = False
                        self.cuts += 1
                if cut:
                    client.sendall(data[: len(data) - (sent - self.cut_after)])
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            shut(client, upstream, close=True)

    def ranged(self) -> list[bytes]:
        return [r for r in self.requests if b"\r\nrange: bytes=" in r.lower()]
