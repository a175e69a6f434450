"""A raw-socket HTTP/1.1 server on loopback whose chunked answers trickle their framing: a
chunk extension, leading zeros in a chunk size, or a trailer section, one byte at a time."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

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


class Framer:
    """A raw-socket HTTP/1.1 server on 127.0.0.1 whose every answer is a chunked 200 framed as
    FORMS[path] says, *trickle* bytes trickled; keep-alive unless *close*, which sends
    ``Connection: close``."""

    def __init__(self, close: bool = False, trickle: int = TRICKLE) -> None:
        self._close = close
        self._trickle = trickle
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener.settimeout(0.05)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.connections = 0
        self.requests: list[str] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{path}"

    def __enter__(self) -> Framer:
        self._accepter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._accepter.join(5.0)
        for thread in self._threads:
            thread.join(5.0)
        self._listener.close()

    def settle(self) -> None:
        """Bounded: until every connection served so far has been answered and closed."""
        for thread in list(self._threads):
            thread.join(5.0)

    def _accept(self) -> None:
        limit = time.monotonic() + 60.0
        while not self._stop.is_set() and time.monotonic() < limit:
            with contextlib.suppress(TimeoutError):
                conn, _ = self._listener.accept()
                with self._lock:
                    self.connections += 1
                thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(20.0)
            for _ in range(20):  # requests on one connection
                head = b""
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    data = conn.recv(65536)
                    if not data:
                        return
                    head += data
                path = head.split(b" ", 2)[1].decode()
                with self._lock:
                    self.requests.append(path)
                closing = b"Connection: close\r\n" if self._close else b""
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + closing)
                prefix, drip, rest = FORMS[path]
                conn.sendall(b"\r\n" + prefix)
                for _ in range(self._trickle if drip else 0):
                    if self._stop.wait(GAP):
                        return
                    conn.sendall(drip)
                conn.sendall(rest)
                if self._close:
                    return
