"""LoopbackService: a WSGI application served on ``127.0.0.1`` from a thread, stdlib only."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

_LOOPBACK: Final = "127.0.0.1"
_STOP_WAIT: Final = 5.0


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        # The demo's output is its events and its table; no access log on stderr.
        return None


class LoopbackService:
    """Serve a WSGI *app* on a free loopback port until the ``with`` block ends.

    One request at a time (the standard library's WSGI server): enough for the demo's
    service in the middle of a chain, with no dependency beyond the runtime ones.
    """

    def __init__(self, app: WSGIApplication) -> None:
        self._server: WSGIServer = make_server(_LOOPBACK, 0, app, handler_class=_QuietHandler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"loopback-service:{self._server.server_port}",
            daemon=True,
        )

    @property
    def host_key(self) -> str:
        """``http://127.0.0.1:PORT``: how events name this service as a host."""
        return f"http://{_LOOPBACK}:{self._server.server_port}"

    def url(self, path: str = "/") -> str:
        return self.host_key + path

    def __enter__(self) -> LoopbackService:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(_STOP_WAIT)
