"""A cluster that isn't there, watching: a loopback TCP listener that records whether anything
connected and serves nothing, and a kubeconfig pointing at it.

A stack pointed at it proves "zero calls to the cluster" by observation (an empty connection log),
not by assuming that a refusal comes early; a valid stack pointed at it shows the log does fill.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import yaml


class ConnectionTrap:
    """Accepts on 127.0.0.1:<free port>, records the first connection (time, peer), closes it at
    once, and refuses every later one: the log says whether anything connected, and a client that
    retries a dropped connection fails at once instead of retrying (client-go retries an EOF ten
    times, a second apart: a preview against an accepting trap waited ~20 s in the Kubernetes
    provider's configure, per preview). The port stays bound (a second socket holds it with
    SO_REUSEPORT), so no other server can take it while the trap refuses."""

    def __init__(self) -> None:
        self._server = self._socket()
        self._server.bind(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._holder = self._socket()
        self._holder.bind(("127.0.0.1", self.port))
        self._server.listen(64)
        self._server.settimeout(0.2)
        self.connections: list[tuple[float, tuple]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name=f"trap-{self.port}", daemon=True)
        self._thread.start()

    @staticmethod
    def _socket() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        return sock

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._server.accept()
            except (TimeoutError, OSError):
                continue
            # From now on refused: no listener left on the port (the holder keeps it bound). Closed
            # before the connection is counted, so a caller that saw the count sees refusals; a
            # connection racing the first into the backlog is reset instead (also not served).
            self._server.close()
            with self._lock:
                self.connections.append((time.time(), peer))
            conn.close()
            return

    def count(self) -> int:
        """Connections recorded: 0, or 1 once anything connected (later ones are refused)."""
        with self._lock:
            return len(self.connections)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._server.close()
        self._holder.close()

    def __enter__(self) -> ConnectionTrap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose only cluster is ``server`` (no real credential in it)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "trap", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "trap", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "trap", "context": {"cluster": "trap", "user": "trap", "namespace": "default"}}],
        "current-context": "trap",
    }))
    return path
