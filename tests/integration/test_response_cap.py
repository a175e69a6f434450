"""retry.max_response_bytes against real sockets: a body past the cap ends the call with
ResponseTooLarge, read one byte past the cap at most, whatever its framing or encoding, and
the bytes the server got into its socket show that reading stopped there."""

from __future__ import annotations

import io
import socket
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from requests.adapters import DEFAULT_POOLSIZE, HTTPAdapter
from structlog.testing import capture_logs
from urllib3.connection import HTTPConnection

from resilient_session import ResilientSession, ResponseTooLarge

from .conftest import FAST_RETRY
from .flood import ENDLESS, PIECE, SEND_BUFFER, Body, Flood

pytestmark = pytest.mark.integration

CAP = 256 * 1024
# The client's receive buffer, as asked: small, so what the server got into its socket is
# close to what the client read.
RECEIVE_BUFFER = 4096


def _slack() -> int:
    """The most body bytes the server can have sent that the client never read: what the two
    socket buffers hold (as the kernel sizes them), one send's overshoot, and http.client's
    read-ahead buffer."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        held = probe.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) + probe.getsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF
        )
    return held + PIECE + io.DEFAULT_BUFFER_SIZE


SLACK = _slack()


def _raw(error: ResponseTooLarge) -> Any:
    """The urllib3 response under the response *error* stands for."""
    assert error.response is not None
    return error.response.raw


def _iterate(response: requests.Response, handed: list[int]) -> None:
    """Read *response* with iter_content, noting the size of each piece handed out."""
    for piece in response.iter_content(10_000):
        handed.append(len(piece))


@pytest.fixture
def flood() -> Iterator[Flood]:
    with Flood() as server:
        yield server


@pytest.fixture
def capped() -> Iterator[ResilientSession]:
    """A session capping every host at CAP, whose sockets have a small receive buffer."""
    with ResilientSession({"defaults": {"retry": {**FAST_RETRY, "max_response_bytes": CAP}}}) as s:
        options = [
            *HTTPConnection.default_socket_options,
            (socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER),
        ]
        adapter = s.get_adapter("http://")
        assert isinstance(adapter, HTTPAdapter)
        adapter.init_poolmanager(DEFAULT_POOLSIZE, DEFAULT_POOLSIZE, socket_options=options)
        yield s


def test_endless_body_not_streamed_ends_the_call_one_byte_past_the_cap(flood, capped):
    """stream=False, a 200 whose body never ends: ResponseTooLarge, cap + 1 body bytes taken
    from the wire, and the server got no more than that plus the buffers into its socket."""
    flood.script("/endless", Body())

    with pytest.raises(ResponseTooLarge) as raised:
        capped.get(flood.url("/endless"))

    (served,) = flood.settle()
    assert _raw(raised.value).tell() == CAP + 1
    assert (_raw(raised.value).status, raised.value.limit) == (200, CAP)
    assert served.sent <= CAP + 1 + SLACK
    assert not served.done  # the server was cut off, far from the end
    assert isinstance(raised.value, requests.RequestException)


def test_endless_body_streamed_raises_from_iter_content(flood, capped):
    """stream=True, the same body: the call returns, iter_content hands out CAP bytes, then
    raises ResponseTooLarge (a RequestException); the connection is closed, never pooled."""
    flood.script("/endless", Body())
    response = capped.get(flood.url("/endless"), stream=True)
    handed: list[int] = []

    with pytest.raises(requests.RequestException) as raised:
        _iterate(response, handed)

    assert type(raised.value) is ResponseTooLarge
    assert (sum(handed), response.raw.tell()) == (CAP, CAP + 1)
    (served,) = flood.settle()
    assert served.sent <= CAP + 1 + SLACK
    flood.script("/small", Body(size=2, framing="length"))
    assert capped.get(flood.url("/small")).content == b"xx"
    assert flood.connections == 2  # the cut connection was not reused


def test_endless_error_body_is_cut_at_the_cap_and_retried(flood, capped, monkeypatch):
    """A 503 whose body never ends, then a 200: the 503 is read to the cap and its connection
    dropped, the retry happens and the call returns the 200."""
    flood.script("/busy", Body(503), Body(200, size=2, framing="length"))
    tries: list[requests.Response] = []
    send = HTTPAdapter.send

    def recording_send(self: HTTPAdapter, request: Any, *args: Any, **kwargs: Any) -> Any:
        response = send(self, request, *args, **kwargs)
        tries.append(response)
        return response

    monkeypatch.setattr(HTTPAdapter, "send", recording_send)

    with capture_logs() as logs:
        response = capped.get(flood.url("/busy"))

    assert (response.status_code, response.content) == (200, b"xx")
    events = [(e["status"], e["error"], e["decision"]) for e in logs if e["event"] == "http.try"]
    assert events == [(503, "ResponseTooLarge", "retry"), (200, None, "success")]
    first, second = flood.settle()
    assert (first.status, second.status) == (503, 200)
    assert tries[0].raw.tell() == CAP + 1
    assert first.sent <= CAP + 1 + SLACK
    assert flood.connections == 2


def test_endless_error_body_keeps_memory_bounded_by_the_cap(flood, capped):
    """A 503 whose body never ends, every try: the call ends with ResponseTooLarge and the
    memory it took stayed within a few times the cap (without the cap: 64 MiB a try)."""
    flood.script("/busy", Body(503))
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLarge):
            capped.get(flood.url("/busy"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 4 * CAP
    served = flood.settle()
    assert len(served) == 4  # retry.max_attempts: each 503 was retried
    assert all(one.sent <= CAP + 1 + SLACK for one in served)


@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
@pytest.mark.parametrize("stream", [False, True], ids=["read", "stream"])
def test_body_exactly_at_the_cap_is_read_whole(flood, capped, framing, stream):
    """A body of exactly CAP bytes, however framed, is the call's result, as without a cap."""
    flood.script("/exact", Body(size=CAP, framing=framing))

    response = capped.get(flood.url("/exact"), stream=stream)

    assert response.content == b"x" * CAP


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_body_exactly_at_the_cap_leaves_the_connection_reusable(flood, capped, framing):
    """A body that ends at the cap was read to its end: its connection carries the next call."""
    flood.script("/exact", Body(size=CAP, framing=framing))

    for _ in range(2):
        assert len(capped.get(flood.url("/exact")).content) == CAP

    assert flood.connections == 1


@pytest.mark.parametrize("stream", [False, True], ids=["read", "stream"])
def test_content_length_over_the_cap_fails_before_the_body_is_read(flood, capped, stream):
    """A Content-Length of CAP + 1 ends the call with ResponseTooLarge before a byte of the
    body is read, streamed or not, and the connection is closed."""
    flood.script("/declared", Body(size=CAP + 1, framing="length"))

    with pytest.raises(ResponseTooLarge, match=r"declares 262145 bytes") as raised:
        capped.get(flood.url("/declared"), stream=stream)

    assert _raw(raised.value).tell() == 0
    (served,) = flood.settle()
    assert served.sent <= SLACK
    flood.script("/small", Body(size=2, framing="length"))
    assert capped.get(flood.url("/small")).content == b"xx"
    assert flood.connections == 2


@pytest.mark.parametrize("stream", [False, True], ids=["read", "stream"])
def test_endless_chunked_body_is_cut_one_byte_past_the_cap(flood, capped, stream):
    """A chunked body that never ends: ResponseTooLarge once CAP + 1 body bytes came in, the
    chunks' framing aside."""
    flood.script("/chunked", Body(framing="chunked"))

    with pytest.raises(ResponseTooLarge) as raised:
        b"".join(capped.get(flood.url("/chunked"), stream=stream).iter_content(10_000))

    assert _raw(raised.value).tell() == CAP + 1
    (served,) = flood.settle()
    assert served.sent <= CAP + 1 + SLACK


@pytest.mark.parametrize("framing", ["close", "chunked"])
@pytest.mark.parametrize("stream", [False, True], ids=["read", "stream"])
def test_gzip_bomb_stops_one_decoded_byte_past_the_cap(flood, capped, framing, stream):
    """An endless gzip body of zeros (a thousandfold ratio): decoding stops once CAP + 1
    decoded bytes came out, with a few KiB of the wire read, and memory stays bounded."""
    flood.script("/bomb", Body(gzip=True, framing=framing))
    handed: list[int] = []
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLarge) as raised:
            _iterate(capped.get(flood.url("/bomb"), stream=stream), handed)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert sum(handed) <= CAP
    assert _raw(raised.value).tell() < CAP // 10  # compressed: a little of the wire
    assert peak < 4 * CAP  # the whole body would decode to ENDLESS bytes
    assert ENDLESS > 100 * CAP
    (served,) = flood.settle()
    assert served.sent < CAP // 10 + SLACK


def test_gzip_body_decoding_to_exactly_the_cap_is_read_whole(flood, capped):
    """A gzip body that decodes to exactly CAP bytes is the call's result."""
    flood.script("/zeros", Body(size=CAP, gzip=True))

    assert capped.get(flood.url("/zeros")).content == b"\0" * CAP


def test_gzip_body_decoding_past_the_cap_is_too_large(flood, capped):
    """A gzip body of a few hundred bytes on the wire that decodes to CAP + 1 bytes is too
    large: the cap counts what the caller would hold."""
    flood.script("/zeros", Body(size=CAP + 1, gzip=True))

    with pytest.raises(ResponseTooLarge) as raised:
        capped.get(flood.url("/zeros"))

    assert _raw(raised.value).tell() < 2000


def test_without_a_cap_the_same_bodies_are_read_whole(flood):
    """The control: with max_response_bytes null, a body many times CAP is read to its end."""
    flood.script("/big", Body(size=8 * CAP, framing="chunked"))

    with ResilientSession() as session:
        assert len(session.get(flood.url("/big")).content) == 8 * CAP
