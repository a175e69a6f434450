"""A raw-socket HTTP/1.1 server on loopback whose chunked answers trickle their framing: a
chunk extension, leading zeros in a chunk size, or a trailer section, one byte at a time."""

from __future__ import annotations

import socket

from .raw_server import RawServer, requests_on

GAP = 0.1  # between trickled bytes: far under any read timeout, so no single read times out
TRICKLE = 100  # bytes trickled: 10 s of framing against a 1 s deadline

# Each form's framing: sent at once, then TRICKLE bytes of the second one GAP apart, then the
# rest at once. The body itself, "hello", is never trickled.
FORMS: dict[str, tuple[bytes, bytes, bytes]] = {
    "/extension": (b"5;ext=", b"a", b"\r\nhello\r\n0\r\n\r\n"),
    "/zeros": (b"", b"0", b"5\r\nhello\r\n0\r\n\r\n"),
    "/trailer": (b"5\r\nhello\r\n0\r\nX-Trailer: ", b"a", b"\r\n\r\n"),
    "/fast": (b"5\r\nhello\r\n0\r\nX-Trailer: done\r\n\r\n", b"", b""),
}
TRICKLED = ["/extension", "/zeros", "/trailer"]


class Framer(RawServer):
    """A raw-socket HTTP/1.1 server on 127.0.0.1 whose every answer is a chunked 200 framed as
    FORMS[path] says, *trickle* bytes trickled; keep-alive unless *close*, which sends
    ``Connection: close``."""

    def __init__(self, close: bool = False, trickle: int = TRICKLE) -> None:
        super().__init__(backlog=128, timeout=20.0)
        self._close = close
        self._trickle = trickle
        self.requests: list[str] = []

    def settle(self) -> None:
        """Bounded: until every connection served so far has been answered and closed."""
        self.joined()

    def serve(self, conn: socket.socket, serial: int) -> None:
        for _, path in requests_on(conn, 20):
            with self._lock:
                self.requests.append(path)
            closing = b"Connection: close\r\n" if self._close else b""
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + closing)
            prefix, drip, rest = FORMS[path]
            conn.sendall(b"\r\n" + prefix)
            for _ in range(self._trickle if drip else 0):
                if self.stopping(GAP):
                    return
                conn.sendall(drip)
            conn.sendall(rest)
            if self._close:
                return
