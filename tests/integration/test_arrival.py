"""When a try's request left and its answer came, read from the kernel on a real loopback
connection: how long a hedge still waits (the rest of its delay from the send, none once the
request has been out for longer, a delay more once the answer is in, read or not)."""

from __future__ import annotations

import contextlib
import select
import socket
import sys
import threading
from collections.abc import Iterator

import pytest

from resilient_session._transport.arrival import hedge_wait

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


def test_a_hedge_waits_out_the_delay_from_the_send_and_never_for_an_answer_in(connection):
    """Sent just now, no answer: the hedge waits (nearly) the whole 0.2 s delay from the send.
    Answered: a delay more, before and after the caller reads it. The next request sent: the
    wait counts from that send again."""
    connection.sendall(b"?")
    assert 0.2 - 0.03 <= hedge_wait(connection, 0.2) <= 0.2
    _wait_readable(connection)
    assert hedge_wait(connection, 0.2) == 0.2
    assert connection.recv(1) == b"!"
    assert hedge_wait(connection, 0.2) == 0.2  # read by its thread: the kernel knows it came
    connection.sendall(b"?")
    assert 0.2 - 0.03 <= hedge_wait(connection, 0.2) <= 0.2


def test_a_request_out_for_longer_than_the_delay_is_hedged_at_once(connection):
    """The server answers LATE (50 ms) after the request; looked at 30 ms on, with no answer
    yet, a request out for longer than a 10 ms delay is hedged at once."""
    connection.sendall(b"?")
    assert not select.select([connection], [], [], 0.03)[0]  # still no answer 30 ms on
    assert hedge_wait(connection, 0.01) == 0.0


def test_no_socket_or_a_closed_one_cannot_tell():
    """Without a socket, or with one closed, nothing is known: the hedge does not wait."""
    closed = socket.socket()
    closed.close()
    assert (hedge_wait(None, 0.2), hedge_wait(closed, 0.2)) == (0.0, 0.0)
