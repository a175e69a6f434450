"""http.client's response as the watched connections build it: informational answers are read
past, to the final one, and at most MAX_INFORMATIONAL of them."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator

import pytest

from resilient_session._transport.interim import MAX_INFORMATIONAL, FinalResponse
from resilient_session._transport.watched import WatchedHTTPConnection, WatchedHTTPSConnection

FINAL = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody"
NEXT = b"HTTP/1.1 204 No Content\r\n\r\n"


def _interim(status: int) -> bytes:
    return f"HTTP/1.1 {status} Informational\r\nLink: </a.css>; rel=preload\r\n\r\n".encode()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        yield ours, theirs


def _read(pair: tuple[socket.socket, socket.socket], wire: bytes) -> FinalResponse:
    ours, theirs = pair
    theirs.sendall(wire)
    response = FinalResponse(ours, method="GET")
    response.begin()
    return response


@pytest.mark.parametrize("statuses", [(), (100,), (103,), (102, 103, 100), (103,) * 5])
def test_the_final_answer_is_the_response_and_the_next_one_stays_unread(pair, statuses):
    """Any informational answers (100, 102, 103; up to five) before a 200: the response is the
    200 with its own headers and body, and what follows it on the wire is left for the next."""
    wire = b"".join(_interim(status) for status in statuses) + FINAL + NEXT

    response = _read(pair, wire)

    assert (response.status, response.getheader("Link"), response.length) == (200, None, 4)
    assert response.fp is not None
    assert response.fp.read(4 + len(NEXT)) == b"body" + NEXT


def test_switching_protocols_is_final(pair):
    """101 Switching Protocols ends the head, as http.client has it: the connection is another
    protocol's from there on."""
    response = _read(pair, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")

    assert (response.status, response.getheader("Upgrade")) == (101, "websocket")


def test_more_than_the_bound_of_informational_answers_is_an_error(pair):
    """A sixth informational answer before any final one raises an HTTPException, which
    urllib3 turns into a broken connection."""
    wire = _interim(103) * (MAX_INFORMATIONAL + 1) + FINAL

    with pytest.raises(http.client.HTTPException, match="more than 5 informational"):
        _read(pair, wire)


def test_both_watched_connections_build_this_response():
    """The HTTP and HTTPS connections the watched pools make both use FinalResponse."""
    assert WatchedHTTPConnection.response_class is FinalResponse
    assert WatchedHTTPSConnection.response_class is FinalResponse
