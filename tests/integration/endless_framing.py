"""A raw-socket HTTP/1.1 server on loopback whose chunked answers are mostly framing, sent as
fast as the client reads: an endless trailer after a five-byte body, or endless one-byte
chunks each behind a long chunk extension or a chunk size padded with zeros. It counts every
byte of the answer after its head that got into its socket, framing included."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field

# Where an "endless" answer stops (then ends its message properly), so that a client that
# reads on for ever still ends, having read this much.
ENDLESS = 64 * 1024 * 1024
_LINE = 4000  # bytes of framing per piece: a trailer line, an extension, a padded size
_SEND_BUFFER = 4096  # as asked; the kernel doubles it (socket(7))
_WAIT = 10.0  # the longest any send or receive waits: a test never hangs on this server


@dataclass(frozen=True)
class Form:
    """What follows the head: *start*, then *piece* again and again (*repeat* times, or until
    ENDLESS bytes were sent), then *end*."""

    start: bytes
    piece: bytes
    end: bytes
    repeat: int | None = None


FORMS: dict[str, Form] = {
    "/trailer": Form(b"5\r\nhello\r\n0\r\n", b"X-Pad: " + b"a" * (_LINE - 9) + b"\r\n", b"\r\n"),
    "/extension": Form(b"", b"1;pad=" + b"a" * (_LINE - 11) + b"\r\nx\r\n", b"0\r\n\r\n"),
    "/zeros": Form(b"", b"0" * (_LINE - 6) + b"1\r\nx\r\n", b"0\r\n\r\n"),
}


@dataclass
class Sent:
    """One answer: the bytes after its head that its sends got into the socket, and whether
    it sent them all (ENDLESS of them, and its end)."""

    path: str
    sent: int = 0
    done: bool = False
    ended: threading.Event = field(default_factory=threading.Event)


class EndlessFraming:
    """The server: every request's path names its form (FORMS, or one scripted); keep-alive."""

    def __init__(self) -> None:
        self._forms = dict(FORMS)
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=16)
        self._listener.settimeout(0.05)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._open: set[socket.socket] = set()
        self.connections = 0
        self.answers: list[Sent] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)

    def script(self, path: str, form: Form) -> None:
        self._forms[path] = form

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{path}"

    def __enter__(self) -> EndlessFraming:
        self._accepter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._accepter.join(_WAIT)
        with self._lock:
            still_open = list(self._open)
        for conn in still_open:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(_WAIT)
        self._listener.close()

    def settle(self) -> list[Sent]:
        """Bounded: wait until every answer so far has ended, then what each sent."""
        with self._lock:
            answers = list(self.answers)
        for one in answers:
            one.ended.wait(_WAIT)
        return answers

    def _accept(self) -> None:
        limit = time.monotonic() + 60.0
        while not self._stop.is_set() and time.monotonic() < limit:
            with contextlib.suppress(TimeoutError):
                conn, _ = self._listener.accept()
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER)
                conn.settimeout(_WAIT)
                with self._lock:
                    self.connections += 1
                    self._open.add(conn)
                thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            for _ in range(20):  # requests on one connection
                head = b""
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    data = conn.recv(65536)
                    if not data:
                        return
                    head += data
                answer = Sent(head.split(b" ", 2)[1].decode())
                with self._lock:
                    self.answers.append(answer)
                try:
                    self._answer(conn, answer)
                finally:
                    answer.ended.set()
        with self._lock:
            self._open.discard(conn)

    def _answer(self, conn: socket.socket, answer: Sent) -> None:
        form = self._forms[answer.path]
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        self._send(conn, form.start, answer)
        repeat = form.repeat if form.repeat is not None else ENDLESS // len(form.piece)
        for _ in range(repeat):
            if self._stop.is_set():
                return
            self._send(conn, form.piece, answer)
        self._send(conn, form.end, answer)
        answer.done = True

    @staticmethod
    def _send(conn: socket.socket, data: bytes, answer: Sent) -> None:
        view = memoryview(data)
        while view:
            count = conn.send(view)
            answer.sent += count
            view = view[count:]
