"""A raw-socket HTTP/1.1 server on loopback whose chunked answers are mostly framing, sent as
fast as the client reads: an endless trailer after a five-byte body, or endless one-byte
chunks each behind a long chunk extension or a chunk size padded with zeros. It counts every
byte of the answer after its head that got into its socket, framing included."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

from .raw_server import WAIT, RawServer, requests_on, send_counted

# Where an "endless" answer stops (then ends its message properly), so that a client that
# reads on for ever still ends, having read this much.
ENDLESS = 64 * 1024 * 1024
_LINE = 4000  # bytes of framing per piece: a trailer line, an extension, a padded size
_SEND_BUFFER = 4096  # as asked; the kernel doubles it (socket(7))


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


class EndlessFraming(RawServer):
    """The server: every request's path names its form (FORMS, or one scripted); keep-alive."""

    def __init__(self) -> None:
        super().__init__(backlog=16, send_buffer=_SEND_BUFFER)
        self._forms = dict(FORMS)
        self.answers: list[Sent] = []

    def script(self, path: str, form: Form) -> None:
        self._forms[path] = form

    def settle(self) -> list[Sent]:
        """Bounded: wait until every answer so far has ended, then what each sent."""
        with self._lock:
            answers = list(self.answers)
        for one in answers:
            one.ended.wait(WAIT)
        return answers

    def serve(self, conn: socket.socket, serial: int) -> None:
        for _, path in requests_on(conn, 20):
            answer = Sent(path)
            with self._lock:
                self.answers.append(answer)
            try:
                self._answer(conn, answer)
            finally:
                answer.ended.set()

    def _answer(self, conn: socket.socket, answer: Sent) -> None:
        form = self._forms[answer.path]
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        send_counted(conn, form.start, answer)
        repeat = form.repeat if form.repeat is not None else ENDLESS // len(form.piece)
        for _ in range(repeat):
            if self.stopping():
                return
            send_counted(conn, form.piece, answer)
        send_counted(conn, form.end, answer)
        answer.done = True
