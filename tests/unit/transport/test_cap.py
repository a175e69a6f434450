"""The response size cap on in-memory sockets: every way of reading a body stops one byte past
the cap, counted decoded and on the wire, and raises ResponseTooLarge, a RequestException."""

from __future__ import annotations

import http.client
import io
import json
import random
import shutil
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter
from urllib3.response import HTTPResponse

from resilient_session import ResponseTooLarge
from resilient_session._state.runtime import runtime_for
from resilient_session._transport.body import DRAIN_LIMIT, drain, read_body
from resilient_session._transport.cap import CappedResponse, caps_any, limit_body
from resilient_session.config import load
from resilient_session.testing import FakeClock

CAP = 10_000
# Where an "endless" body ends, so that a read the cap misses still ends.
FAR = 8 * 1024 * 1024
URL = "http://svc.test/items?token=s3cret"


class Wire(io.RawIOBase):
    """A socket's bytes: *head*, then the pieces of *body* until it ends or FAR bytes went
    by; counts what was taken."""

    def __init__(self, head: bytes, body: Iterator[bytes]) -> None:
        self._pending = head
        self._body = body
        self.taken = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending and self.taken < FAR:
            piece = next(self._body, b"")
            if not piece:
                break
            self._pending = piece
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        self.taken += size
        return size


class Socket:
    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self.wire)


class Connection:
    """What a urllib3 response closes and hands back to its pool."""

    closed = False

    def close(self) -> None:
        self.closed = True


class Pool:
    def __init__(self) -> None:
        self.returned: list[Connection] = []

    def _put_conn(self, conn: Connection) -> None:
        self.returned.append(conn)


def endless(piece: bytes) -> Iterator[bytes]:
    while True:
        yield piece


def once(body: bytes) -> Iterator[bytes]:
    yield body


def chunked(pieces: Iterator[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    yield b"0\r\n\r\n"


def gzip_zeros(total: int | None = None, piece: int = 256 * 1024) -> Iterator[bytes]:
    """Zeros compressed as they go, *total* of them decoded (None: without end)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    left = FAR * 1000 if total is None else total
    while left > 0:
        size = min(piece, left)
        left -= size
        yield compressor.compress(b"\0" * size) + compressor.flush(zlib.Z_SYNC_FLUSH)
    yield compressor.flush()


def empty_blocks() -> Iterator[bytes]:
    """A gzip stream of empty deflate blocks without end: it decodes to nothing at all."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    yield compressor.compress(b"") + compressor.flush(zlib.Z_SYNC_FLUSH)
    # RFC 1951 §3.2.4: a stored block, not the last, of length 0 (and its one's complement).
    yield from endless(b"\x00\x00\x00\xff\xff" * 200)


def respond(
    body: Iterator[bytes],
    headers: str = "Connection: close",
    status: int = 200,
    cap: int | None = CAP,
) -> tuple[requests.Response, Wire, Connection, Pool]:
    """A requests response over *body*, built as HTTPAdapter builds it, then capped at *cap*."""
    wire = Wire(f"HTTP/1.1 {status} X\r\n{headers}\r\n\r\n".encode(), body)
    original = http.client.HTTPResponse(Socket(wire))  # type: ignore[arg-type]
    original.begin()
    connection, pool = Connection(), Pool()
    raw = HTTPResponse(
        body=original,
        headers=dict(original.getheaders()),
        status=original.status,
        preload_content=False,
        decode_content=False,
        original_response=original,
        pool=pool,  # type: ignore[arg-type]
        connection=connection,  # type: ignore[arg-type]
    )
    request = requests.Request("GET", URL).prepare()
    response = HTTPAdapter().build_response(request, raw)
    if cap is not None:
        limit_body(response, cap, frozenset({"token"}))
    return response, wire, connection, pool


def pieces_of(read: Callable[[], bytes], pieces: list[bytes]) -> None:
    """Call *read* until it returns nothing, adding each piece to *pieces*; bounded by FAR."""
    for _ in range(FAR):
        piece = read()
        if not piece:
            break
        pieces.append(piece)


# -- an endless body -----------------------------------------------------------------------------


def test_reading_the_whole_body_stops_one_byte_past_the_cap():
    """raw.read() of an endless body takes CAP + 1 body bytes off the wire (and no more than
    http.client's read-ahead beyond), then raises ResponseTooLarge."""
    response, wire, _, _ = respond(endless(b"x" * 1000))

    with pytest.raises(ResponseTooLarge):
        response.raw.read()

    assert response.raw.tell() == CAP + 1
    assert wire.taken <= len(b"HTTP/1.1 200 X\r\nConnection: close\r\n\r\n") + CAP + 1 + 8192


class Sink:
    """A file to copy into: what is written lands in *out*."""

    def __init__(self, out: list[bytes]) -> None:
        self.write = out.append


def _readinto(raw: Any, size: int) -> bytes:
    buffer = bytearray(size)
    return bytes(buffer[: raw.readinto(buffer)])


READERS: dict[str, Callable[[requests.Response, list[bytes]], None]] = {
    "iter_content": lambda r, out: out.extend(r.iter_content(777)),
    "raw.stream": lambda r, out: out.extend(r.raw.stream(777)),
    "raw.read(n)": lambda r, out: pieces_of(lambda: r.raw.read(777), out),
    "raw.read1(n)": lambda r, out: pieces_of(lambda: r.raw.read1(777), out),
    "raw.read1()": lambda r, out: pieces_of(r.raw.read1, out),
    "raw.readinto": lambda r, out: pieces_of(lambda: _readinto(r.raw, 777), out),
    "copyfileobj": lambda r, out: shutil.copyfileobj(r.raw, Sink(out), 777),
}


@pytest.mark.parametrize("reader", READERS, ids=list(READERS))
def test_every_streaming_read_hands_out_the_cap_then_raises(reader):
    """Read piece by piece, an endless body hands out exactly CAP bytes, then the read that
    would cross the cap raises ResponseTooLarge itself (no requests wrapper type)."""
    response, _, _, _ = respond(endless(b"x" * 1000))
    out: list[bytes] = []

    with pytest.raises(requests.RequestException) as raised:
        READERS[reader](response, out)

    assert type(raised.value) is ResponseTooLarge
    assert len(b"".join(out)) == CAP
    assert response.raw.tell() == CAP + 1


def test_iter_lines_hands_out_the_whole_lines_within_the_cap_then_raises():
    """iter_lines yields every whole line within the cap, then raises ResponseTooLarge."""
    response, _, _, _ = respond(endless(b"x" * 1000 + b"\n"))
    lines: list[bytes] = []

    with pytest.raises(ResponseTooLarge):
        lines.extend(response.iter_lines(777))

    assert lines == [b"x" * 1000] * (CAP // 1001)


@pytest.mark.parametrize("read", ["content", "text", "json"])
def test_reading_the_body_at_once_raises(read):
    """content, text and json() of an endless body raise ResponseTooLarge."""
    response, _, _, _ = respond(endless(b"x" * 1000))

    with pytest.raises(ResponseTooLarge):
        getattr(response, read)() if read == "json" else getattr(response, read)


def test_the_connection_is_closed_and_handed_back_closed():
    """At the cap the connection is closed and goes back to its pool closed: the pool keeps its
    slot and never reuses the socket."""
    response, _, connection, pool = respond(endless(b"x" * 1000))

    with pytest.raises(ResponseTooLarge):
        _ = response.content

    assert connection.closed
    assert pool.returned == [connection]


def test_every_read_after_the_cap_raises_again():
    """Once over the cap, every read raises again: a body cut at the cap never reads as an
    empty or short one."""
    response, _, _, _ = respond(endless(b"x" * 1000))
    with pytest.raises(ResponseTooLarge):
        response.raw.read()

    reads: list[Callable[[], bytes]] = [
        lambda: response.raw.read(),
        lambda: response.raw.read(10),
        lambda: response.raw.read1(),
        lambda: next(response.raw.stream(10)),
        lambda: response.content,
    ]
    for read in reads:
        with pytest.raises(ResponseTooLarge):
            read()


def test_the_error_names_status_url_redacted_and_cap():
    """The message names the status, the URL without its secret and the cap; the exception
    carries the response, its request and the cap, and no chain."""
    response, _, _, _ = respond(endless(b"x" * 1000), status=503)

    with pytest.raises(ResponseTooLarge) as raised:
        _ = response.content

    error = raised.value
    assert str(error) == (
        "the body of 503 from http://svc.test/items?token=REDACTED is longer than "
        f"retry.max_response_bytes ({CAP} bytes)"
    )
    assert (error.limit, error.response, error.original) == (CAP, response, None)
    assert error.request is response.request
    assert error.__suppress_context__


def test_decode_content_false_reads_count_too():
    """Reads of the encoded body (decode_content=False, as requests' redirects use) are held
    to the cap as well."""
    response, _, _, _ = respond(endless(b"x" * 1000))

    with pytest.raises(ResponseTooLarge):
        response.raw.read(decode_content=False)


# -- framing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_endless_chunked_body_stops_one_byte_past_the_cap(stream):
    """A chunked body that never ends is de-chunked through the cap's count: CAP + 1 body
    bytes, the framing aside."""
    response, _, _, _ = respond(chunked(endless(b"x" * 999)), "Transfer-Encoding: chunked")
    read = (lambda: list(response.iter_content(1000))) if stream else response.raw.read

    with pytest.raises(ResponseTooLarge):
        read()

    assert response.raw.tell() == CAP + 1


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (once(b"x" * CAP), f"Content-Length: {CAP}"),
        (once(b"x" * CAP), "Connection: close"),
        (chunked(iter([b"x" * (CAP - 1), b"x"])), "Transfer-Encoding: chunked"),
        (chunked(iter([b"x"] * CAP)), "Transfer-Encoding: chunked"),
    ],
    ids=["length", "close", "chunked", "one-byte-chunks"],
)
def test_a_body_of_exactly_the_cap_reads_whole(body, headers):
    """A body of exactly CAP bytes, however framed, reads whole and hands its connection back
    open."""
    response, _, connection, _ = respond(body, headers)

    assert response.content == b"x" * CAP
    assert not connection.closed


@pytest.mark.parametrize("declared", [CAP + 1, 10**12])
def test_content_length_over_the_cap_fails_before_reading(declared):
    """A Content-Length over the cap raises as the response is built, with no byte of the body
    read and the connection closed."""
    with pytest.raises(ResponseTooLarge, match=f"declares {declared} bytes, more than") as raised:
        respond(once(b"x" * 100), f"Content-Length: {declared}")

    assert raised.value.response is not None
    assert raised.value.response.raw.tell() == 0


def test_content_length_at_the_cap_and_head_responses_pass():
    """A Content-Length of exactly the cap is no reason to fail, and a 204 has no body."""
    response, _, _, _ = respond(once(b"x" * CAP), f"Content-Length: {CAP}")
    assert len(response.content) == CAP
    empty, _, _, _ = respond(once(b""), "Content-Length: 0", status=204)
    assert empty.content == b""


# -- encodings -----------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["content", "iter_content", "raw.read1"])
def test_a_decompression_bomb_stops_one_decoded_byte_past_the_cap(reader):
    """gzip'd zeros without end: decoding stops once CAP decoded bytes are handed out, having
    taken a few hundred bytes off the wire, and no piece is larger than asked for."""
    response, wire, _, _ = respond(gzip_zeros(), "Content-Encoding: gzip")
    pieces: list[bytes] = []
    reads: dict[str, Callable[[], object]] = {
        "content": lambda: response.content,
        "iter_content": lambda: pieces.extend(response.iter_content(1000)),
        "raw.read1": lambda: pieces_of(lambda: response.raw.read1(1000, True), pieces),
    }

    with pytest.raises(ResponseTooLarge):
        reads[reader]()

    assert sum(map(len, pieces)) <= CAP
    assert max(map(len, pieces), default=0) <= 1000
    assert wire.taken < 64 * 1024


def test_a_gzip_body_decoding_to_exactly_the_cap_reads_whole():
    """The decoded count is what the cap holds: a gzip body that decodes to exactly CAP bytes
    is read whole, one decoding to CAP + 1 is too large."""
    exact, _, _, _ = respond(gzip_zeros(CAP), "Content-Encoding: gzip")
    assert exact.content == b"\0" * CAP
    over, _, _, _ = respond(gzip_zeros(CAP + 1), "Content-Encoding: gzip")
    with pytest.raises(ResponseTooLarge):
        _ = over.content


def test_a_stream_that_decodes_to_nothing_stops_at_the_cap_on_the_wire():
    """Endless empty deflate blocks decode to nothing: the wire count stops them at CAP + 1."""
    response, _, _, _ = respond(empty_blocks(), "Content-Encoding: gzip")

    with pytest.raises(ResponseTooLarge):
        _ = response.content

    assert response.raw.tell() == CAP + 1


def test_incompressible_gzip_is_held_to_the_cap_on_the_wire_too():
    """Random bytes grow a little when compressed: such a body that decodes to CAP bytes is
    longer than CAP on the wire, and too large."""
    data = random.Random(0).randbytes(CAP)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    response, _, _, _ = respond(
        once(compressor.compress(data) + compressor.flush()), "Content-Encoding: gzip"
    )

    with pytest.raises(ResponseTooLarge):
        _ = response.content


# -- reading inside the try, draining before a retry ---------------------------------------------


def test_read_body_under_a_deadline_raises_response_too_large(clock: FakeClock):
    """The try's own read (stream=False, with a deadline) stops at the cap with
    ResponseTooLarge, not a deadline error, on the fake clock."""
    response, _, _, _ = respond(endless(b"x" * 1000))
    runtime = runtime_for(load({}), clock, random.Random(0))

    with pytest.raises(ResponseTooLarge):
        read_body(response, clock.monotonic() + 5.0, runtime)

    assert response.raw.tell() == CAP + 1
    assert clock.sleeps == []


def test_drain_before_a_retry_stops_at_the_cap_and_the_body_stays_too_large(clock: FakeClock):
    """A streamed 503 drained before a retry is read no further than the cap (under
    DRAIN_LIMIT here), its connection closed; read later, it raises ResponseTooLarge."""
    assert CAP < DRAIN_LIMIT
    response, _, connection, _ = respond(endless(b"e" * 1000), status=503)
    runtime = runtime_for(load({}), clock, random.Random(0))

    drain(response, None, runtime)

    assert response.raw.tell() == CAP + 1
    assert connection.closed
    with pytest.raises(ResponseTooLarge):
        _ = response.content


# -- what is capped ------------------------------------------------------------------------------


def test_a_response_not_read_through_urllib3_is_left_alone():
    """A raw that is not urllib3's own HTTPResponse (a file, a subclass) keeps its reads."""
    response = requests.Response()
    response.raw = io.BytesIO(b"x" * (CAP * 2))
    limit_body(response, CAP, frozenset())
    assert len(response.content) == CAP * 2
    assert not isinstance(response.raw, CappedResponse)


def test_no_cap_leaves_urllib3_s_response_as_it_is():
    """Without a cap the response keeps urllib3's class and reads whole."""
    response, _, _, _ = respond(once(b"x" * (CAP * 2)), cap=None)
    assert type(response.raw) is HTTPResponse
    assert len(response.content) == CAP * 2


@pytest.mark.parametrize(
    ("config", "capped"),
    [
        ({}, False),
        ({"defaults": {"retry": {"max_response_bytes": None}}}, False),
        ({"defaults": {"retry": {"max_response_bytes": 1}}}, True),
        ({"hosts": {"a.test": {"retry": {"max_response_bytes": 1}}}}, True),
        (
            {
                "defaults": {"retry": {"max_response_bytes": 1}},
                "hosts": {"*": {"retry": {"max_response_bytes": None}}},
            },
            True,
        ),
    ],
)
def test_caps_any_sees_a_cap_in_the_defaults_or_any_host(config, capped):
    """A cap anywhere, defaults or a host entry, makes the adapter build capped responses."""
    assert caps_any(load(config)) is capped


def test_json_of_a_body_within_the_cap_reads_as_usual():
    """A JSON body within the cap decodes as it would without one."""
    body = json.dumps({"items": list(range(100))}).encode()
    response, _, _, _ = respond(once(body), f"Content-Length: {len(body)}")
    assert response.json() == {"items": list(range(100))}
