"""A raw-socket HTTP/1.1 server on loopback that sends informational (1xx) answers before the
final one: ``103 Early Hints`` with a header, a pause, then the answer, as a CDN that hints
its preloads while the origin still thinks."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from .raw_server import RawServer, requests_on

_MAX_REQUESTS = 50  # per connection


@dataclass(frozen=True)
class Interim:
    """Before the answer to *path*: each status of *statuses* as an informational answer with
    one header, then *pause* seconds; *final* is the answer's status line."""

    statuses: tuple[int, ...] = (103,)
    pause: float = 0.0
    final: str = "200 OK"


class InterimUpstream(RawServer):
    """Answers every request with a body naming its path and its number on its connection
    (``reply to /a #1``), after the informational answers scripted for its path."""

    def __init__(self) -> None:
        super().__init__()
        self._scripts: dict[str, Interim] = {}
        self.requests: list[tuple[int, str]] = []  # (connection, path)

    def script(self, path: str, interim: Interim) -> None:
        self._scripts[path] = interim

    def serve(self, conn: socket.socket, serial: int) -> None:
        for number, path in requests_on(conn, _MAX_REQUESTS):
            with self._lock:
                self.requests.append((serial, path))
            interim = self._scripts.get(path, Interim(statuses=()))
            for status in interim.statuses:
                conn.sendall(
                    f"HTTP/1.1 {status} Informational\r\n"
                    "Link: </style.css>; rel=preload; as=style\r\n\r\n".encode()
                )
            if interim.pause and self.stopping(interim.pause):
                return
            body = f"reply to {path} #{number}".encode()
            conn.sendall(
                f"HTTP/1.1 {interim.final}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
            )
