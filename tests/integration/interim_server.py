"""A raw-socket HTTP/1.1 server on loopback that sends informational (1xx) answers before the
final one: ``103 Early Hints`` with a header, a pause, then the answer, as a CDN that hints
its preloads while the origin still thinks."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass

_WAIT = 10.0  # the longest any send or receive waits: a test never hangs on this server
_MAX_REQUESTS = 50  # per connection


@dataclass(frozen=True)
class Interim:
    """Before the answer to *path*: each status of *statuses* as an informational answer with
    one header, then *pause* seconds; *final* is the answer's status line."""

    statuses: tuple[int, ...] = (103,)
    pause: float = 0.0
    final: str = "200 OK"


class InterimUpstream:
    """Answers every request with a body naming its path and its number on its connection
    (``reply to /a #1``), after the informational answers scripted for its path."""

    def __init__(self) -> None:
        self._scripts: dict[str, Interim] = {}
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.05)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._open: set[socket.socket] = set()
        self.connections = 0
        self.requests: list[tuple[int, str]] = []  # (connection, path)
        self._accepter = threading.Thread(target=self._accept, daemon=True)

    def script(self, path: str, interim: Interim) -> None:
        self._scripts[path] = interim

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{path}"

    def __enter__(self) -> InterimUpstream:
        self._accepter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._accepter.join(_WAIT)
        with self._lock:
            still_open = list(self._open)
        for conn in still_open:  # a connection kept alive waits for its next request
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(_WAIT)
        self._listener.close()

    def _accept(self) -> None:
        limit = time.monotonic() + 60.0
        while not self._stop.is_set() and time.monotonic() < limit:
            with contextlib.suppress(TimeoutError):
                conn, _ = self._listener.accept()
                with self._lock:
                    self.connections += 1
                    serial = self.connections
                    self._open.add(conn)
                thread = threading.Thread(target=self._serve, args=(conn, serial), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _serve(self, conn: socket.socket, serial: int) -> None:
        conn.settimeout(_WAIT)
        buffer = b""
        with conn, contextlib.suppress(OSError):
            for number in range(1, _MAX_REQUESTS + 1):
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data or len(buffer) > 65536:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                with self._lock:
                    self.requests.append((serial, path))
                interim = self._scripts.get(path, Interim(statuses=()))
                for status in interim.statuses:
                    conn.sendall(
                        f"HTTP/1.1 {status} Informational\r\n"
                        "Link: </style.css>; rel=preload; as=style\r\n\r\n".encode()
                    )
                if interim.pause and self._stop.wait(interim.pause):
                    return
                body = f"reply to {path} #{number}".encode()
                conn.sendall(
                    f"HTTP/1.1 {interim.final}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
        with self._lock:
            self._open.discard(conn)
