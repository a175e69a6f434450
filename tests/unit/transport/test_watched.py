"""A watched connection duplicates whatever socket-like object urllib3 gave it."""

from __future__ import annotations

import socket

from resilient_session._transport.watchdog import WATCHDOG, Watch
from resilient_session._transport.watched import WatchedHTTPConnection


class _TransportLike:
    """What urllib3 keeps for HTTPS through an HTTPS proxy (an SSLTransport): a descriptor, but
    no ``family`` or ``type``."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def fileno(self) -> int:
        return self._sock.fileno()


def test_a_pooled_connection_without_family_or_type_is_still_watched():
    """Arming a pooled connection whose socket is transport-like duplicates its descriptor
    instead of raising AttributeError; the duplicate is the same TCP socket."""
    ours, theirs = socket.socketpair()
    connection = WatchedHTTPConnection("127.0.0.1", 80)
    connection.sock = _TransportLike(ours)
    watch = Watch(60.0)
    try:
        connection._arm(watch)
        shutter = connection._shutter
        assert shutter is not None
        assert shutter.fileno() != ours.fileno()
        shutter.sendall(b"x")
        assert theirs.recv(1) == b"x"
    finally:
        WATCHDOG.disarm(watch)
        connection.sock = None
        connection.close()
        ours.close()
        theirs.close()
