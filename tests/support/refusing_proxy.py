"""A loopback HTTP relay standing for a store that does not implement ``?partNumber=`` on HEAD or
GET (it answers 501 NotImplemented, as S3 does for an operation it lacks); every other request
goes through to the real store unchanged (bytes relayed as they are, so the SigV4 signature made
for the relay's host still holds). Preview's requests come one at a time on a connection, so a
request that asks for a part is answered here and its connection closed.
"""

from __future__ import annotations

import socket

from tests.support.relay import LoopbackRelay, shut

REFUSAL = (b"HTTP/1.1 501 Not Implemented\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n"
           b"Connection: close\r\n\r\n%s")
BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code>'
        b"<Message>A header or query you provided implies functionality that is not implemented.</Message></Error>")


class RefusingProxy(LoopbackRelay):
    def __init__(self, upstream_port: int):
        self.refused = 0
        super().__init__(upstream_port)

    def _up(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                line = data.split(b"\r\n", 1)[0]
                if line[:4] in (b"GET ", b"HEAD") and b"partNumber=" in line:
                    self.refused += 1
                    body = b"" if line.startswith(b"HEAD") else BODY
                    client.sendall(REFUSAL % (len(BODY), body))
                    break
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            shut(client, upstream)

    def _down(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while data := upstream.recv(65536):
                client.sendall(data)
        except OSError:
            pass
        finally:
            shut(client, upstream)
