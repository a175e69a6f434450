"""retry.max_response_bytes counts the chunked framing too: an answer that is mostly framing (an
endless trailer, endless chunk extensions or zero-padded chunk sizes around one-byte chunks)
ends the call with ResponseTooLarge once framing and body together pass twice the cap and
64 KiB, instead of being read for as long as the upstream sends it."""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator

import pytest
from requests.adapters import DEFAULT_POOLSIZE, HTTPAdapter
from urllib3.connection import HTTPConnection

from resilient_session import ResilientSession, ResponseTooLarge

from .endless_framing import ENDLESS, EndlessFraming, Form

pytestmark = pytest.mark.integration

CAP = 1024 * 1024
# Body and framing together: twice the cap, and 64 KiB.
WIRE_LIMIT = 2 * CAP + 64 * 1024
RECEIVE_BUFFER = 4096  # as asked: small, so what the server sent is close to what was read


def _slack() -> int:
    """The most bytes the server can have sent that the client never took: what the two
    socket buffers hold (as the kernel sizes them), one piece of framing, and http.client's
    read-ahead buffer."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        held = probe.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) + probe.getsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF
        )
    return held + 4096 + io.DEFAULT_BUFFER_SIZE


@pytest.fixture
def server() -> Iterator[EndlessFraming]:
    with EndlessFraming() as upstream:
        yield upstream


@pytest.fixture
def capped() -> Iterator[ResilientSession]:
    """A session capping every host at CAP, with no deadline and one try a call, whose sockets
    have a small receive buffer."""
    config = {"defaults": {"retry": {"max_attempts": 1, "max_response_bytes": CAP}}}
    with ResilientSession(config) as session:
        options = [
            *HTTPConnection.default_socket_options,
            (socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER),
        ]
        adapter = session.get_adapter("http://")
        assert isinstance(adapter, HTTPAdapter)
        adapter.init_poolmanager(DEFAULT_POOLSIZE, DEFAULT_POOLSIZE, socket_options=options)
        yield session


def test_the_wire_limit_is_twice_the_cap_and_64_kib():
    """Framing may add as many bytes as the body has, and 64 KiB more."""
    from resilient_session._transport.cap import wire_limit

    assert (wire_limit(CAP), wire_limit(1)) == (WIRE_LIMIT, 65538)


@pytest.mark.parametrize("path", ["/trailer", "/extension", "/zeros"])
@pytest.mark.parametrize("stream", [False, True], ids=["read", "stream"])
def test_endless_framing_ends_the_call_past_the_wire_limit(server, capped, path, stream):
    """A body that never grows past a few bytes inside endless framing: ResponseTooLarge,
    with no more than the wire limit read and the server cut off far from its 64 MiB."""
    began = time.monotonic()

    with pytest.raises(ResponseTooLarge, match="chunked framing") as raised:
        capped.get(server.url(path), stream=stream).content  # noqa: B018 - the read is the test

    elapsed = time.monotonic() - began
    (answer,) = server.settle()
    assert raised.value.limit == CAP
    assert answer.sent <= WIRE_LIMIT + _slack()
    assert not answer.done
    assert ENDLESS > 10 * WIRE_LIMIT
    assert elapsed < 10.0


def test_the_cut_connection_is_not_reused(server, capped):
    """The connection the framing came on is closed: the next call opens another."""
    with pytest.raises(ResponseTooLarge):
        capped.get(server.url("/trailer"))
    server.script("/short", Form(b"", b"2\r\nok\r\n", b"0\r\n\r\n", repeat=1))

    assert capped.get(server.url("/short")).content == b"ok"
    assert server.connections == 2


@pytest.mark.parametrize("size", [8, 128])
def test_a_body_of_the_cap_in_small_chunks_is_read_whole(server, capped, size):
    """A body of exactly CAP bytes sent in chunks of 8 or 128 bytes, and a trailer: the framing
    (five bytes a chunk) fits the allowance, so the body is the call's result and the
    connection is kept for the next call."""
    chunk = f"{size:x}\r\n".encode() + b"y" * size + b"\r\n"
    server.script("/small", Form(b"", chunk, b"0\r\nX-Checksum: 1\r\n\r\n", repeat=CAP // size))

    for _ in range(2):
        assert capped.get(server.url("/small")).content == b"y" * CAP

    assert server.connections == 1


def test_a_body_of_the_cap_in_one_byte_chunks_is_refused(server, capped):
    """One-byte chunks carry five bytes of framing each: a body of CAP bytes sent so takes six
    times CAP on the wire and is refused at the wire limit, about a third of it read."""
    server.script("/bytes", Form(b"", b"1\r\ny\r\n", b"0\r\n\r\n", repeat=CAP))

    with pytest.raises(ResponseTooLarge, match="chunked framing"):
        capped.get(server.url("/bytes"))

    (answer,) = server.settle()
    assert WIRE_LIMIT < answer.sent <= WIRE_LIMIT + _slack()
