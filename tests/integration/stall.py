"""A loopback origin that never accepts, for tests of a connect that hangs."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

from resilient_session.testing.upstream import LOOPBACK


@contextlib.contextmanager
def full_backlog() -> Iterator[str]:
    """An origin whose listening socket never accepts and whose backlog is full, so a connect
    to it hangs in SYN-SENT until the client's connect timeout."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind((LOOPBACK, 0))
        listener.listen(0)
        address = listener.getsockname()
        for _ in range(4):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            with contextlib.suppress(BlockingIOError):
                filler.connect(address)
        yield f"http://{LOOPBACK}:{address[1]}"
    finally:
        for sock in [*fillers, listener]:
            sock.close()
