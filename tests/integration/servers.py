"""Production servers on loopback for the cross-hop tests: waitress (WSGI) and uvicorn (ASGI),
each started in-process on a free port in a thread and stopped by the context manager."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from waitress import create_server, wasyncore

_READY_WAIT = 10.0
_STOP_WAIT = 10.0


@contextmanager
def waitress_server(app: Any, *, threads: int = 8, **adjustments: Any) -> Iterator[str]:
    """Serve the WSGI *app* with waitress on 127.0.0.1, with waitress's own *adjustments*
    (``trusted_proxy=...``); yields its base URL."""
    server: Any = create_server(app, host="127.0.0.1", port=0, threads=threads, **adjustments)
    stopping = threading.Event()

    def run() -> None:
        # server.run()'s loop, one poll at a time, so that it stops when asked and closes
        # its sockets in its own thread (closing them from another races the poll).
        while not stopping.is_set():
            wasyncore.loop(timeout=0.05, map=server._map, count=1)
        wasyncore.close_all(server._map)

    thread = threading.Thread(target=run, name="waitress", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        stopping.set()
        thread.join(_STOP_WAIT)
        server.task_dispatcher.shutdown(timeout=_STOP_WAIT)
        assert not thread.is_alive(), "waitress did not stop"


@contextmanager
def uvicorn_server(app: Any, *, lifespan: bool = False) -> Iterator[str]:
    """Serve the ASGI *app* with uvicorn on 127.0.0.1; yields its base URL. With *lifespan*
    the app's startup runs before the URL is yielded and its shutdown before the server
    stops, on the server's loop (where an app opens and closes its own async clients)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on" if lifespan else "off",
        ws="none",
        http="h11",
        access_log=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True
    )
    thread.start()
    try:
        ready_by = time.monotonic() + _READY_WAIT
        while not server.started and thread.is_alive() and time.monotonic() < ready_by:
            time.sleep(0.01)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(_STOP_WAIT)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not stop"
