"""The trap the no-cluster tests point stacks at (tests/support/no_cluster.py): it sees a
connection, then refuses the retries at once and keeps its port from any other server."""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.no_cluster import ConnectionTrap


def test_the_first_connection_is_recorded_and_later_ones_are_refused():
    with ConnectionTrap() as trap:
        assert trap.count() == 0
        socket.create_connection(("127.0.0.1", trap.port), timeout=2).close()
        for _ in range(50):  # the accept thread records it
            if trap.count():
                break
            time.sleep(0.02)
        assert trap.count() == 1
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", trap.port), timeout=2)
        other = socket.socket()
        with pytest.raises(OSError, match="in use"):
            other.bind(("127.0.0.1", trap.port))
        other.close()
