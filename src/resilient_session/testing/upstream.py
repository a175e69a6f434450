"""FlakyUpstream: a scripted, misbehaving HTTP/1.1 server on loopback, for demos and tests."""

from __future__ import annotations

import contextlib
import random
import socket
import socketserver
import struct
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Final, cast
from urllib.parse import urlsplit

from .faults import (
    DEFAULT_REPLY,
    MAX_WAIT,
    CloseWithoutReply,
    Drip,
    Flaky,
    Hang,
    Hit,
    Reply,
    ResetMidBody,
    Step,
    Trickle,
)

__all__ = [
    "MAX_WAIT",
    "CloseWithoutReply",
    "Drip",
    "Flaky",
    "FlakyUpstream",
    "Hang",
    "Hit",
    "Reply",
    "ResetMidBody",
    "Step",
    "Trickle",
    "refused_url",
]

LOOPBACK: Final = "127.0.0.1"

# Request bodies past this size are refused, so a runaway client cannot exhaust memory.
_MAX_BODY: Final = 16 * 1024 * 1024
# How long stop() waits for handler threads to notice the shutdown and finish.
_STOP_GRACE: Final = 2.0
# Idle keep-alive connections are dropped after this long, so no handler thread lives forever.
_IDLE_TIMEOUT: Final = 30.0


class _Script:
    """The steps of one path and how far through them it is."""

    def __init__(self, steps: tuple[Step, ...], cycle: bool) -> None:
        self.steps = steps
        self.cycle = cycle
        self.played = 0
        self.rngs = {
            index: random.Random(step.seed)  # noqa: S311 - failure injection, not secrets
            for index, step in enumerate(steps)
            if isinstance(step, Flaky)
        }

    def next_step(self) -> Step:
        count = len(self.steps)
        index = self.played % count if self.cycle else min(self.played, count - 1)
        self.played += 1
        step = self.steps[index]
        if isinstance(step, Flaky):
            failed = self.rngs[index].random() < step.rate
            return Reply(step.status) if failed else Reply(200, body=step.body)
        return step


class FlakyUpstream:
    """A real HTTP/1.1 server on ``127.0.0.1`` (a free port) that misbehaves on request.

    Each path plays its script, one step per request, the last step repeating; unscripted
    paths answer 200 ``ok``. Connections are kept alive between requests, as a real server
    keeps them. Every request is recorded, and every wait is cut short by :meth:`stop`.

    Example::

        with FlakyUpstream() as up:
            up.script("/items", Reply(503), Reply(503), Reply(200, body=b"ok"))
            ResilientSession().get(up.url("/items"))   # 200, after up.hits("/items") == 3
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._scripts: dict[str, _Script] = {}
        self._hits: list[Hit] = []
        self._connections = 0
        self._open: dict[socket.socket, threading.Thread] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FlakyUpstream:
        """Bind a free loopback port and serve in a daemon thread; returns self.

        Raises:
            RuntimeError: the upstream is already running.
        """
        if self._server is not None:
            raise RuntimeError("FlakyUpstream is already running")
        self._stopping.clear()
        server = _Server(self)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"flaky-upstream:{server.server_port}",
            daemon=True,
        )
        self._server, self._thread = server, thread
        thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut every open connection and wait (briefly) for handlers to end.

        Safe to call twice; returns within a few seconds at most, even while steps hang or
        drip, since every wait in a step ends when the upstream stops.
        """
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            still_open = list(self._open.items())
        for sock, _handler in still_open:
            # A handler blocked reading the next keep-alive request wakes with EOF.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        thread.join(_STOP_GRACE)
        for _sock, handler in still_open:
            handler.join(_STOP_GRACE / max(1, len(still_open)))
        self._server = self._thread = None

    def __enter__(self) -> FlakyUpstream:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses ---------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """Always ``127.0.0.1``: the upstream never listens beyond loopback."""
        return LOOPBACK

    @property
    def port(self) -> int:
        """The port bound at :meth:`start`.

        Raises:
            RuntimeError: the upstream is not running.
        """
        if self._server is None:
            raise RuntimeError("FlakyUpstream is not running; call start() or use `with`")
        return int(self._server.server_port)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``, without a trailing slash."""
        return f"http://{LOOPBACK}:{self.port}"

    def url(self, path: str = "/") -> str:
        """The absolute URL of *path* (which may carry a query) on this upstream."""
        return self.base_url + (path if path.startswith("/") else "/" + path)

    # -- scripting ---------------------------------------------------------------------------

    def script(self, path: str, *steps: Step, cycle: bool = False) -> None:
        """Play *steps* on *path*, one per request, from the next request on.

        Args:
            path: the request path to script, without query.
            *steps: what to do with each request in turn; at least one.
            cycle: start over after the last step instead of repeating it.

        Raises:
            ValueError: no steps were given.
        """
        if not steps:
            raise ValueError("script() needs at least one step")
        with self._lock:
            self._scripts[path] = _Script(steps, cycle)

    # -- what was received -------------------------------------------------------------------

    def hits(self, path: str) -> int:
        """How many requests *path* received, whatever the method or query."""
        with self._lock:
            return sum(1 for hit in self._hits if hit.path == path)

    @property
    def total_hits(self) -> int:
        """How many requests the upstream received on every path."""
        with self._lock:
            return len(self._hits)

    @property
    def connections(self) -> int:
        """How many TCP connections the upstream accepted."""
        with self._lock:
            return self._connections

    def received(self, path: str | None = None) -> list[Hit]:
        """Every request received on *path* (or on every path), oldest first."""
        with self._lock:
            return [hit for hit in self._hits if path is None or hit.path == path]

    # -- used by the handler -----------------------------------------------------------------

    def _opened(self, sock: socket.socket) -> int:
        with self._lock:
            self._connections += 1
            self._open[sock] = threading.current_thread()
            serial = self._connections
        if self._stopping.is_set():
            # Accepted just as stop() took its list of connections to cut: cut it here.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return serial

    def _closed(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.pop(sock, None)

    def _record(self, hit: Hit) -> Step:
        with self._lock:
            self._hits.append(hit)
            found = self._scripts.get(hit.path)
            return found.next_step() if found is not None else DEFAULT_REPLY

    def _wait(self, seconds: float) -> bool:
        """Wait up to *seconds*; False when the upstream is stopping."""
        return not self._stopping.wait(min(seconds, MAX_WAIT))


def refused_url(path: str = "/") -> str:
    """A loopback URL on a port where, right now, nothing listens.

    The port is one the system just handed out and released, so a connect is refused.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port = int(probe.getsockname()[1])
    return f"http://{LOOPBACK}:{port}" + (path if path.startswith("/") else "/" + path)


class _Server(ThreadingHTTPServer):
    """A threading HTTP server bound to loopback that reports to its FlakyUpstream."""

    daemon_threads = True
    # Room for a burst of concurrent clients: the default of 5 drops SYNs, which clients
    # then retransmit a second later, and tests would measure that instead of the script.
    request_queue_size = 128

    def __init__(self, upstream: FlakyUpstream) -> None:
        self.upstream = upstream
        super().__init__((LOOPBACK, 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, a DNS lookup loopback never needs.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: object, client_address: object) -> None:
        # Clients hanging up mid-reply is the point of this server, not an error to print.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]  # typeshed


class _Handler(BaseHTTPRequestHandler):
    """Reads each request fully, records it, then plays the path's next step."""

    protocol_version = "HTTP/1.1"
    timeout = _IDLE_TIMEOUT
    # Each reply is written as it is produced; Nagle would hold the body back for an ACK.
    disable_nagle_algorithm = True

    @property
    def _upstream(self) -> FlakyUpstream:
        return cast(_Server, self.server).upstream

    def setup(self) -> None:
        super().setup()
        self._serial = self._upstream._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self._upstream._closed(self.connection)

    def log_message(self, format: str, *args: object) -> None:
        """Silent: tests and the demo report what matters themselves."""

    def _serve(self) -> None:
        body = self._read_body()
        if body is None:
            return
        target = self.path
        step = self._upstream._record(
            Hit(
                method=self.command,
                path=urlsplit(target).path,
                target=target,
                headers=tuple(self.headers.items()),
                body=body,
                client=(str(self.client_address[0]), int(self.client_address[1])),
                connection=self._serial,
                # The upstream stands for another process: it keeps its own real time.
                at=time.monotonic(),  # noqa: TID251
            )
        )
        self._play(step)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _serve

    def _read_body(self) -> bytes | None:
        """The whole request body, so the connection can carry the next request.

        Returns None, having answered 400 or 413, when the body cannot be read.
        """
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0:
            self.send_error(HTTPStatus.BAD_REQUEST, "bad Content-Length")
            return None
        if length > _MAX_BODY:
            self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
            return None
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes | None:
        # RFC 9112 §7.1: size line, data, CRLF, until a zero-size chunk and the trailers.
        parts: list[bytes] = []
        size_total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self.send_error(HTTPStatus.BAD_REQUEST, "bad chunk size")
                return None
            size_total += size
            if size_total > _MAX_BODY:
                self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
                return None
            if size == 0:
                break
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)
        for _ in range(100):  # trailers, bounded
            if self.rfile.readline(1024) in (b"\r\n", b"\n", b""):
                break
        return b"".join(parts)

    def _play(self, step: Step) -> None:
        if isinstance(step, Reply):
            self._reply(step)
        elif isinstance(step, Hang):
            self._upstream._wait(step.seconds)
            self.close_connection = True
        elif isinstance(step, ResetMidBody):
            self._reset_mid_body(step)
        elif isinstance(step, Drip):
            self._drip(step)
        elif isinstance(step, Trickle):
            self._trickle(step)
        elif isinstance(step, CloseWithoutReply):
            self.close_connection = True
        else:  # Flaky is resolved to a Reply when the step is chosen
            raise TypeError(f"unexpected step {step!r}")

    def _reply(self, reply: Reply) -> None:
        if reply.delay and not self._upstream._wait(reply.delay):
            self.close_connection = True
            return
        # RFC 9110 §6.4.1: 1xx, 204 and 304 responses never carry content.
        bodiless = reply.status < 200 or reply.status in (204, 304)
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        named = {name.lower() for name in reply.headers}
        if not bodiless and "content-length" not in named:
            self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if not bodiless and self.command != "HEAD":
            self.wfile.write(reply.body)

    def _reset_mid_body(self, step: ResetMidBody) -> None:
        self.send_response(step.status)
        self.send_header("Content-Length", str(step.declared))
        self.end_headers()
        self.wfile.write(step.sent)
        self._upstream._wait(step.pause)
        self.close_connection = True
        # SO_LINGER on with a zero timeout turns close() into an abort: RST, not FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # rfile holds a reference to the socket; both must go for the close to happen now.
        self.rfile.close()
        self.connection.close()

    def _drip(self, step: Drip) -> None:
        self.send_response(step.status)
        self.send_header("Content-Length", str(step.total_bytes))
        self.end_headers()
        left = step.total_bytes
        waited = 0.0
        while left > 0:
            if waited >= MAX_WAIT or not self._upstream._wait(step.interval):
                # Cut short: the client sees fewer bytes than promised.
                self.close_connection = True
                return
            waited += step.interval
            size = min(step.chunk, left)
            self.wfile.write(b"x" * size)
            left -= size

    def _trickle(self, step: Trickle) -> None:
        head = (
            f"HTTP/1.1 {step.status} {_reason(step.status)}\r\n"
            f"Content-Length: {len(step.body)}\r\n\r\n"
        ).encode("latin-1")
        waited = 0.0
        for index in range(len(head)):
            if waited >= MAX_WAIT or not self._upstream._wait(step.interval):
                self.close_connection = True
                return
            waited += step.interval
            self.wfile.write(head[index : index + 1])
        self.wfile.write(step.body)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
