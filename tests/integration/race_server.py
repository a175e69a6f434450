"""A loopback HTTP/1.1 upstream for the hedging tests: each request waits as scripted before its
answer, and a client that closes the connection meanwhile is seen doing so."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType

_MAX_HEAD = 64 * 1024
_MAX_REQUESTS = 1_000  # per connection
_IDLE = 10.0  # seconds a kept-alive connection may sit without a request
_POLL = 0.01


@dataclass(frozen=True)
class Seen:
    """One request: its order among all, its method and path, its ``X-Request-Attempt`` and
    the connection it came on (numbered from 1)."""

    number: int
    method: str
    path: str
    attempt: str | None
    connection: int


@dataclass(frozen=True)
class Answer:
    """Wait *delay* seconds, then answer *status*; the body names the request's number."""

    delay: float = 0.0
    status: int = 200


class RaceUpstream:
    """Answers the n-th request with the n-th scripted answer (the last repeating), and
    records which connections the client closed while their request was still waiting."""

    def __init__(self, *answers: Answer) -> None:
        self._answers = answers or (Answer(),)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.seen: list[Seen] = []
        self.closed_waiting: list[int] = []  # connections closed by the client mid-wait
        self._connections = 0
        self._played = 0
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener.settimeout(_POLL * 10)
        self.port: int = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._accept, name="race-upstream", daemon=True)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, *answers: Answer) -> None:
        """Answer the requests from now on with *answers*; the count starts again."""
        with self._lock:
            self._answers = answers
            self._played = 0

    def wait_closed(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until *count* connections were closed mid-wait; False if that never came."""
        ends = time.monotonic() + timeout
        while time.monotonic() < ends:
            with self._lock:
                if len(self.closed_waiting) >= count:
                    return True
            time.sleep(_POLL)
        return False

    def __enter__(self) -> RaceUpstream:
        self._acceptor.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._acceptor.join(5)
        self._listener.close()
        with self._lock:
            still_open = list(self._open)
        for conn in still_open:  # a handler waiting for the next request wakes with EOF
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self._connections += 1
                serial = self._connections
                self._open.append(conn)
            thread = threading.Thread(
                target=self._serve, args=(conn, serial), name=f"race-conn-{serial}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket, serial: int) -> None:
        with conn:
            buffer = b""
            for _ in range(_MAX_REQUESTS):
                head, buffer = self._read_head(conn, buffer)
                if head is None:
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (line.partition(":") for line in lines[1:])
                }
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    end = b"0\r\n\r\n"  # the generator bodies sent here have no trailer
                    while end not in buffer:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buffer += chunk
                    buffer = buffer.partition(end)[2]
                else:
                    length = int(headers.get("content-length", "0"))
                    while len(buffer) < length:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buffer += chunk
                    buffer = buffer[length:]
                with self._lock:
                    number = len(self.seen) + 1
                    self.seen.append(
                        Seen(number, method, path, headers.get("x-request-attempt"), serial)
                    )
                    answer = self._answers[min(self._played, len(self._answers) - 1)]
                    self._played += 1
                if not self._wait(conn, answer.delay):
                    with self._lock:
                        self.closed_waiting.append(serial)
                    return
                body = f"reply {number}".encode()
                conn.sendall(
                    f"HTTP/1.1 {answer.status} X\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )

    def _read_head(self, conn: socket.socket, buffer: bytes) -> tuple[bytes | None, bytes]:
        conn.settimeout(_IDLE)
        while b"\r\n\r\n" not in buffer:
            if len(buffer) > _MAX_HEAD or self._stop.is_set():
                return None, b""
            try:
                chunk = conn.recv(65536)
            except OSError:
                return None, b""
            if not chunk:
                return None, b""
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        return head, rest

    def _wait(self, conn: socket.socket, seconds: float) -> bool:
        """Wait *seconds*; False as soon as the client closes (or resets) the connection."""
        ends = time.monotonic() + seconds
        while (left := ends - time.monotonic()) > 0 and not self._stop.is_set():
            readable, _, _ = select.select([conn], [], [], min(left, _POLL * 5))
            if readable:
                try:
                    if not conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                        return False
                except BlockingIOError:
                    pass
                except OSError:  # reset
                    return False
                time.sleep(_POLL)  # a pipelined request: not ours to read yet
        return True
