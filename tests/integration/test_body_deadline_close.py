"""The deadline cuts a dripping body even when the upstream closes the connection after it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from resilient_session import DeadlineExceeded, ResilientSession

pytestmark = pytest.mark.integration

HEAD = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 10\r\n\r\n"
GAP = 0.9  # between body bytes: under the read timeout, and a deadline of 1 s falls inside one


@pytest.fixture
def closing_dripper() -> Iterator[str]:
    """A server that answers one request with its headers at once, then one body byte every
    GAP seconds, and closes the connection after the body (at most 10 bytes, ~9 s)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    stop = threading.Event()

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.recv(65536)
            conn.sendall(HEAD)
            for _ in range(10):
                if stop.wait(GAP):
                    return
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/drip"
    stop.set()
    listener.close()
    thread.join(timeout=5)


def test_a_dripping_body_with_connection_close_is_cut_at_the_deadline(closing_dripper):
    """Headers say the connection will close, so urllib3 detaches it from the response; each
    body read must still be bounded by what is left of the deadline, not the 5 s read timeout."""
    with ResilientSession({"defaults": {"retry": {"max_attempts": 1}}}) as session:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            session.get(closing_dripper, timeout=(1, 5), deadline=1.0)
        elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 1.5


def test_a_body_cut_names_the_url_without_configured_secrets(upstream):
    """events.redact_params reaches the messages the library builds, not only the events."""
    from resilient_session.testing.upstream import Drip

    upstream.script("/d", Drip(total_bytes=200, interval=0.05))
    config = {"defaults": {"retry": {"max_attempts": 1}}, "events": {"redact_params": ["mytoken"]}}
    with ResilientSession(config) as session, pytest.raises(DeadlineExceeded) as caught:
        session.get(upstream.url("/d?mytoken=SECRET&page=2"), deadline=0.3)
    assert "SECRET" not in str(caught.value)
    assert "mytoken=REDACTED&page=2" in str(caught.value)
