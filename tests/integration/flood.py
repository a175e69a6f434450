"""A raw-socket HTTP/1.1 server on loopback whose bodies may never end, and which counts the
body bytes each answer got into its socket: what a client read, plus what the buffers held."""

from __future__ import annotations

import socket
import threading
import zlib
from dataclasses import dataclass, field
from typing import Literal

from .raw_server import WAIT, RawServer, requests_on, send_counted

# Where an "endless" body stops, so that a client that reads on for ever still ends.
ENDLESS = 64 * 1024 * 1024
PIECE = 1000  # bytes per send: the count of what went out is exact to the send
# The server's send buffer, as asked; the kernel doubles it (socket(7)).
SEND_BUFFER = 4096
GZIP_PIECE = 1024 * 1024  # decoded bytes per send of a gzip body


def _zeros() -> tuple[bytes, bytes]:
    """An endless gzip stream of zeros: its start, then a piece that can follow it, and
    itself, for ever (each ends on a sync flush, with a window of zeros behind it); each
    decodes to GZIP_PIECE zeros and takes about a thousandth of that on the wire."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    start = compressor.compress(b"\0" * GZIP_PIECE) + compressor.flush(zlib.Z_SYNC_FLUSH)
    more = compressor.compress(b"\0" * GZIP_PIECE) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return start, more


_ZEROS_START, _ZEROS_MORE = _zeros()


@dataclass(frozen=True)
class Body:
    """One answer: *status*, then *size* body bytes (None: endless), framed by Content-Length
    (*declared* when given, else *size*), chunked, or by closing the connection. With *gzip*
    (chunked or close only), *size* counts decoded bytes: zeros, compressed as they are sent."""

    status: int = 200
    size: int | None = None
    framing: Literal["length", "chunked", "close"] = "close"
    gzip: bool = False
    declared: int | None = None


@dataclass
class Served:
    """What one answer did: its path and status, the body bytes its sends got into the socket
    (after compression, without the chunked framing), and whether it sent its whole body."""

    path: str
    status: int
    sent: int = 0
    done: bool = False
    ended: threading.Event = field(default_factory=threading.Event)


class Flood(RawServer):
    """The server: each path plays its Body list in order, the last one repeating."""

    def __init__(self) -> None:
        super().__init__(accepting_for=120.0, send_buffer=SEND_BUFFER)
        self._scripts: dict[str, list[Body]] = {}
        self.served: list[Served] = []

    def script(self, path: str, *bodies: Body) -> None:
        self._scripts[path] = list(bodies)

    def settle(self) -> list[Served]:
        """Bounded: wait until every answer so far has ended (sent whole, or cut off by the
        client), then what each did."""
        with self._lock:
            served = list(self.served)
        for one in served:
            one.ended.wait(WAIT)
        return served

    def serve(self, conn: socket.socket, serial: int) -> None:
        for _, path in requests_on(conn, 20):
            with self._lock:
                bodies = self._scripts.get(path, [Body(size=2, framing="length")])
                body = bodies.pop(0) if len(bodies) > 1 else bodies[0]
                served = Served(path, body.status)
                self.served.append(served)
            try:
                if not self._answer(conn, body, served):
                    return
            finally:
                served.ended.set()

    def _answer(self, conn: socket.socket, body: Body, served: Served) -> bool:
        """Send *body*; True when the connection may carry another request."""
        lines = [f"HTTP/1.1 {body.status} Flood"]
        if body.gzip:
            lines.append("Content-Encoding: gzip")
        if body.framing == "length":
            lines.append(
                f"Content-Length: {body.declared if body.declared is not None else body.size}"
            )
        elif body.framing == "chunked":
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append("Connection: close")
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        chunked = body.framing == "chunked"
        if body.gzip and body.size is None:
            # Made once, ahead: a memory test counts this process's allocations, the
            # server's included.
            self._send(conn, _ZEROS_START, served, chunked=chunked)
            for _ in range(ENDLESS // GZIP_PIECE):
                if self.stopping():
                    break
                self._send(conn, _ZEROS_MORE, served, chunked=chunked)
        elif body.gzip:
            compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
            left = body.size or 0
            while left > 0:
                size = min(GZIP_PIECE, left)
                left -= size
                self._send(conn, compressor.compress(b"\0" * size), served, chunked=chunked)
            self._send(conn, compressor.flush(), served, chunked=chunked)
        else:
            left = ENDLESS if body.size is None else body.size
            while left > 0 and not self.stopping():
                size = min(PIECE, left)
                left -= size
                self._send(conn, b"x" * size, served, chunked=chunked)
        if body.framing == "chunked":
            conn.sendall(b"0\r\n\r\n")
        served.done = True
        return body.framing != "close"

    def _send(self, conn: socket.socket, data: bytes, served: Served, *, chunked: bool) -> None:
        if not data:
            return
        if chunked:
            conn.sendall(f"{len(data):x}\r\n".encode())
        send_counted(conn, data, served)
        if chunked:
            conn.sendall(b"\r\n")
