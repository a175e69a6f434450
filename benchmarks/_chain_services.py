"""The chain benchmark's services, each in a process of its own: C, a scripted upstream, and B,
a real service (WSGI under waitress, or ASGI under uvicorn) that calls C once per request:
with a blocking client from a sync endpoint, or, for the async lane, with an async httpx
client from an async endpoint, the client opened and closed by the app's lifespan.

C answers every request with a 503, or reads it and never answers (a hang). It records each
request: when it arrived, the call it belongs to (``X-Call-Id``, which B passes on), the two
cross-hop headers, and for a hang when the connection was closed, which is when B's try ended.
Times are ``time.monotonic()``, shared by every process on Linux.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import multiprocessing
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

import requests

CALL_ID = "X-Call-Id"
UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n"
    b"\r\nunavailable"
)
# B's own timeouts for its call to C, for every stack: short, so a run without the middleware
# (where nothing else ends B's wait on a hanging C) still takes seconds, not minutes.
B_TIMEOUT = (1.0, 2.0)
# B's clients that are awaited, on uvicorn's loop: AsyncResilientClient, and httpx-retries'
# RetryTransport as a peer.
ASYNC_STACKS = ("async", "httpx-retries")
_P = TypeVar("_P", bound="_Process")
_START_WAIT = 30.0
_STOP_WAIT = 10.0


class Try(NamedTuple):
    """One request C received."""

    at: float
    call_id: int
    timeout_ms: str | None
    attempt: str | None
    closed_at: float | None  # hang: when B closed the connection; None otherwise


# -- C ---------------------------------------------------------------------------------------


class _CHandler(asyncio.Protocol):
    def __init__(self, state: dict[str, Any]) -> None:
        self._state = state
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._held: list[list[Any]] = []  # the tries this connection holds unanswered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        self._buffer += data
        while (end := self._buffer.find(b"\r\n\r\n")) >= 0:
            head, self._buffer = self._buffer[:end], self._buffer[end + 4 :]
            headers = _headers(head)
            call_id = headers.get(CALL_ID.lower(), "-1")
            row = [
                time.monotonic(),
                int(call_id) if call_id.isdigit() else -1,
                headers.get("x-request-timeout-ms"),
                headers.get("x-request-attempt"),
                None,
            ]
            self._state["tries"].append(row)
            if self._state["mode"] == "hang":
                self._held.append(row)
            else:
                self._transport.write(UNAVAILABLE)

    def connection_lost(self, exc: Exception | None) -> None:
        now = time.monotonic()
        for row in self._held:
            row[4] = now  # a row collected already is a copy sent away: this one is dropped


def _headers(head: bytes) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        found[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return found


def _serve_c(conn: Connection, lifetime: float) -> None:
    asyncio.run(_c_main(conn, lifetime))


async def _c_main(conn: Connection, lifetime: float) -> None:
    loop = asyncio.get_running_loop()
    state: dict[str, Any] = {"mode": "503", "tries": []}
    server = await loop.create_server(lambda: _CHandler(state), "127.0.0.1", 0, backlog=1024)
    conn.send(server.sockets[0].getsockname()[1])
    done: asyncio.Future[None] = loop.create_future()

    def on_message() -> None:
        try:
            kind, *args = conn.recv()
        except (EOFError, OSError):
            kind, args = "stop", []
        if kind == "mode":
            state["mode"], state["tries"] = args[0], []
            conn.send(args[0])
        elif kind == "collect":
            conn.send(state["tries"])
            state["tries"] = []
        elif not done.done():
            done.set_result(None)

    loop.add_reader(conn.fileno(), on_message)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done, timeout=lifetime)
    loop.remove_reader(conn.fileno())
    server.close()


class _Process:
    """A service process that sends its port first, then answers messages."""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=target, args=(child, *args), daemon=True)
        self._process.start()
        child.close()
        if not self._conn.poll(_START_WAIT):
            self.close()
            raise RuntimeError(f"{target.__name__} did not start")
        self.port: int = self._conn.recv()

    def ask(self, *message: Any) -> Any:
        self._conn.send(message)
        if not self._conn.poll(_START_WAIT):
            raise RuntimeError("the service did not answer")
        return self._conn.recv()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(("stop",))
        self._process.join(_STOP_WAIT)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(_STOP_WAIT)
        self._conn.close()

    def __enter__(self: _P) -> _P:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class C(_Process):
    """The scripted upstream, seen from the benchmark."""

    def __init__(self, lifetime: float = 900.0) -> None:
        super().__init__(_serve_c, lifetime)

    def mode(self, mode: str) -> None:
        """``"503"`` or ``"hang"`` from the next request on; clears the recorded tries."""
        self.ask("mode", mode)

    def collect(self) -> list[Try]:
        """Every try recorded since the last mode or collect."""
        return [Try(*row) for row in self.ask("collect")]


# -- B ---------------------------------------------------------------------------------------


def b_session(stack: str, config: dict[str, Any]) -> requests.Session:
    """B's client for *stack*: urllib3 Retry(3), or a ResilientSession under *config*."""
    if stack == "urllib3":
        return urllib3_session()
    from resilient_session import ResilientSession

    return ResilientSession(config)


def urllib3_session() -> requests.Session:
    """requests with urllib3's Retry(3) on 503, a small backoff, as services commonly mount it."""
    from requests.adapters import HTTPAdapter
    from urllib3.util import Retry

    session = requests.Session()
    retry = Retry(total=3, status_forcelist=[503], backoff_factor=0.001, raise_on_status=False)
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    return session


def b_async_client(stack: str, config: dict[str, Any]) -> Any:
    """B's async client for *stack*: httpx-retries' Retry(3) on 503, or an
    AsyncResilientClient under *config*; B's timeouts on C are given per request."""
    if stack == "httpx-retries":
        return httpx_retries_client()
    from resilient_session.httpx import AsyncResilientClient

    return AsyncResilientClient(config)


def httpx_retries_client(**kwargs: Any) -> Any:
    """httpx with httpx-retries' Retry(3) on 503 and a small backoff: urllib3's Retry(3) as
    services mount it, for httpx.AsyncClient."""
    import httpx
    from httpx_retries import Retry, RetryTransport

    retry = Retry(total=3, status_forcelist=[503], backoff_factor=0.001)
    return httpx.AsyncClient(transport=RetryTransport(retry=retry), **kwargs)


def _call_c(session: requests.Session, c_url: str, call_id: str) -> tuple[int, bytes]:
    try:
        response = session.get(c_url, headers={CALL_ID: call_id}, timeout=B_TIMEOUT)
    except requests.RequestException as exc:
        return 504, type(exc).__name__.encode()
    return response.status_code, response.content


def _wsgi_app(session: requests.Session, c_url: str) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, body = _call_c(session, c_url, environ.get("HTTP_X_CALL_ID", "-1"))
        start_response(
            f"{status} {http.HTTPStatus(status).phrase}", [("Content-Length", str(len(body)))]
        )
        return [body]

    return app


def _asgi_app(session: requests.Session, c_url: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    # A sync endpoint: Starlette runs it in its thread pool, as a blocking client must be run.
    def call(request: Request) -> Response:
        status, body = _call_c(session, c_url, request.headers.get(CALL_ID, "-1"))
        return Response(body, status_code=status)

    return Starlette(routes=[Route("/call", call)])


def _async_asgi_app(stack: str, c_url: str, config: dict[str, Any]) -> Any:
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    timeout = httpx.Timeout(B_TIMEOUT[1], connect=B_TIMEOUT[0])
    clients: list[Any] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Made on uvicorn's loop, where it is used, and closed there.
        async with b_async_client(stack, config) as client:
            clients.append(client)
            yield

    async def call(request: Request) -> Response:
        headers = {CALL_ID: request.headers.get(CALL_ID, "-1")}
        try:
            answer = await clients[0].get(c_url, headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            return Response(type(exc).__name__.encode(), status_code=504)
        return Response(answer.content, status_code=answer.status_code)

    return Starlette(routes=[Route("/call", call)], lifespan=lifespan)


def _serve_b(
    conn: Connection, server: str, stack: str, middleware: bool, c_url: str, config: Any
) -> None:
    from resilient_session.inbound import ASGIMiddleware, WSGIMiddleware

    awaited = stack in ASYNC_STACKS
    if awaited and server != "uvicorn":
        raise ValueError(f"an async client runs under uvicorn, not {server}")
    session = None if awaited else b_session(stack, config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    stopping = threading.Event()
    if server == "waitress":
        from waitress import create_server, wasyncore

        app: Any = _wsgi_app(session, c_url)
        if middleware:
            app = WSGIMiddleware(app, config)
        waitress: Any = create_server(app, sockets=[sock], threads=32)

        def run() -> None:
            while not stopping.is_set():
                wasyncore.loop(timeout=0.05, map=waitress._map, count=1)
            wasyncore.close_all(waitress._map)
            waitress.task_dispatcher.shutdown(timeout=_STOP_WAIT)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
    else:
        import uvicorn

        if session is None:
            asgi = _async_asgi_app(stack, c_url, config)
        else:
            asgi = _asgi_app(session, c_url)
        if middleware:
            asgi.add_middleware(ASGIMiddleware, config=config)
        settings = uvicorn.Config(
            asgi,
            log_level="warning",
            lifespan="on" if awaited else "off",
            ws="none",
            http="h11",
            access_log=False,
        )
        uvicorn_server = uvicorn.Server(settings)
        thread = threading.Thread(
            target=uvicorn_server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        thread.start()
        ready_by = time.monotonic() + _START_WAIT
        while not uvicorn_server.started and time.monotonic() < ready_by:
            time.sleep(0.01)
    conn.send(port)
    with contextlib.suppress(EOFError, OSError):
        conn.recv()  # anything, or the parent's end closing, means stop
    stopping.set()
    if server != "waitress":
        uvicorn_server.should_exit = True
    thread.join(_STOP_WAIT)
    if session is not None:
        session.close()


class B(_Process):
    """B: *server* ("waitress" or "uvicorn") serving /call, which calls C with *stack*'s client
    (one of ASYNC_STACKS: under uvicorn, from an async endpoint)."""

    def __init__(
        self, server: str, stack: str, middleware: bool, c_url: str, config: dict[str, Any]
    ) -> None:
        super().__init__(_serve_b, server, stack, middleware, c_url, config)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/call"
