"""The skeleton of the loopback fault relays the S3 puller tests put between rclone and the store
(`cut_proxy`, `corrupt_proxy`, `refusing_proxy`): a listening socket on 127.0.0.1, one upstream
connection per client connection, and one thread per direction. A subclass says what happens to
the bytes (`_up`: client → store, `_down`: store → client); the store speaks plain HTTP on
loopback, so a relay sees and can change every byte."""

from __future__ import annotations

import socket
import threading


class LoopbackRelay:
    def __init__(self, upstream_port: int):
        # Subclasses set their own state before calling this: the accept thread starts here.
        self.upstream = ("127.0.0.1", upstream_port)
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            for relay, args in self._directions(client, upstream):
                threading.Thread(target=relay, args=args, daemon=True).start()

    def _directions(self, client: socket.socket, upstream: socket.socket) -> tuple:
        """(function, args) per direction of one connection: the subclass's ``_up`` and ``_down``;
        override to give both a per-connection state."""
        return ((self._up, (client, upstream)), (self._down, (upstream, client)))


def shut(*socks: socket.socket, close: bool = False) -> None:
    """Shut both directions of each socket (and close it), ignoring sockets already gone."""
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
            if close:
                sock.close()
        except OSError:
            pass
