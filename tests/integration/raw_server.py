"""What the raw-socket HTTP/1.1 servers of the tests share: a listener on 127.0.0.1, a bounded
accept loop, a thread per connection, and a stop that ends every wait, so a test never hangs
on one. Each server says only how it answers (``serve``); ``read_head`` reads one request's
head off a keep-alive connection."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's is 3.11's

WAIT = 10.0  # the longest any send, receive or join waits
HEAD_LIMIT = 65536  # a longer head is no request these tests send


class RawServer:
    """A server on a free loopback port: started by ``with``, stopped on leaving it.

    Args:
        accepting_for: how long the accept loop runs at most, in seconds.
        backlog: the listener's backlog.
        send_buffer: SO_SNDBUF for each connection, as asked (the kernel doubles it), or None
            for the system's.
        timeout: each connection's socket timeout.
    """

    def __init__(
        self,
        *,
        accepting_for: float = 60.0,
        backlog: int = 64,
        send_buffer: int | None = None,
        timeout: float = WAIT,
    ) -> None:
        self._accepting_for = accepting_for
        self._send_buffer = send_buffer
        self._timeout = timeout
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        self._listener.settimeout(0.05)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._open: set[socket.socket] = set()
        self.connections = 0
        self._accepter = threading.Thread(target=self._accept, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{path}"

    def __enter__(self) -> Self:
        self._accepter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._accepter.join(WAIT)
        with self._lock:
            still_open = list(self._open)
        for conn in still_open:
            # A connection kept alive waits for its next request: end that wait.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in list(self._threads):
            thread.join(WAIT)
        self._listener.close()

    def serve(self, conn: socket.socket, serial: int) -> None:
        """Answer the requests on *conn*, the *serial*-th connection accepted; the socket is
        closed after it returns or raises an ``OSError``."""
        raise NotImplementedError

    def stopping(self, seconds: float = 0.0) -> bool:
        """Whether the server is stopping, after waiting up to *seconds* for it."""
        return self._stop.wait(seconds)

    def _accept(self) -> None:
        limit = time.monotonic() + self._accepting_for
        while not self._stop.is_set() and time.monotonic() < limit:
            with contextlib.suppress(TimeoutError):
                conn, _ = self._listener.accept()
                if self._send_buffer is not None:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
                conn.settimeout(self._timeout)
                with self._lock:
                    self.connections += 1
                    serial = self.connections
                    self._open.add(conn)
                thread = threading.Thread(target=self._run, args=(conn, serial), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _run(self, conn: socket.socket, serial: int) -> None:
        try:
            with conn, contextlib.suppress(OSError):
                self.serve(conn, serial)
        finally:
            with self._lock:
                self._open.discard(conn)

    def joined(self) -> None:
        """Bounded: until every connection served so far has been answered and closed."""
        for thread in list(self._threads):
            thread.join(WAIT)


def read_head(conn: socket.socket, buffer: bytes = b"") -> tuple[bytes, bytes] | None:
    """One request's head (up to its blank line) and what came after it, read from *conn*
    after *buffer*; None when the client closed first or sent no head within HEAD_LIMIT."""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > HEAD_LIMIT:
            return None
        data = conn.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head, rest


def requests_on(conn: socket.socket, most: int) -> Iterator[tuple[int, str]]:
    """Each request on the keep-alive connection *conn*, up to *most* of them: its number on
    the connection (from 1) and its path, once its head is read; ends when the client closes."""
    buffer = b""
    for number in range(1, most + 1):
        read = read_head(conn, buffer)
        if read is None:
            return
        head, buffer = read
        yield number, path_of(head)


def path_of(head: bytes) -> str:
    """The request target of a request's head."""
    return head.split(b" ", 2)[1].decode()


def send_counted(conn: socket.socket, data: bytes, into: Any) -> None:
    """Send *data* whole, adding each send's count to ``into.sent``: what got into the socket
    is then known to the send."""
    view = memoryview(data)
    while view:
        count = conn.send(view)
        into.sent += count
        view = view[count:]
