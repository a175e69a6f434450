"""Whether a try's answer has reached its socket, read from the kernel on a real loopback
connection: not before the answer comes, yes once it is in, read or not, and not again once
the next request has gone out."""

from __future__ import annotations

import contextlib
import select
import socket
import sys
import threading
from collections.abc import Iterator

import pytest

from resilient_session._transport.arrival import answer_in

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_INFO is Linux's"),
]

LATE = 0.05  # the answer comes this long after the request: ticks apart on any kernel
WAIT = 5.0  # longest wait for a socket: never reached when it works


@pytest.fixture
def connection() -> Iterator[socket.socket]:
    """A loopback connection to a server that answers each byte it reads, LATE seconds on."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        peer, _ = server.accept()
        # The client may close first, and reset the connection: the test is over then.
        with peer, contextlib.suppress(OSError):
            for _ in range(10):  # bounded: a test sends a few requests at most
                if not peer.recv(1) or stop.wait(LATE):
                    return
                peer.sendall(b"!")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = socket.create_connection(server.getsockname(), timeout=WAIT)
    try:
        yield client
    finally:
        stop.set()
        client.close()
        server.close()
        thread.join(WAIT)


def _wait_readable(sock: socket.socket) -> None:
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    assert poller.poll(WAIT * 1000), "no answer came"


def test_an_answer_is_in_once_it_reached_the_socket_read_or_not(connection):
    """Sent and not answered: no. Answered: yes, before and after the caller reads it. The
    next request sent: no again, until its own answer comes."""
    connection.sendall(b"?")
    assert not answer_in(connection)
    _wait_readable(connection)
    assert answer_in(connection)
    assert connection.recv(1) == b"!"
    assert answer_in(connection)  # read by its thread: the kernel still knows it came
    connection.sendall(b"?")
    assert not answer_in(connection)
    _wait_readable(connection)
    assert answer_in(connection)


def test_no_socket_or_a_closed_one_cannot_tell():
    """Without a socket, or with one closed, the answer is "not known": a hedge may go."""
    closed = socket.socket()
    closed.close()
    assert (answer_in(None), answer_in(closed)) == (False, False)
