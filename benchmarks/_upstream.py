"""A loopback HTTP/1.1 upstream in its own process, fast enough never to be what is measured.

One process runs one asyncio loop with one listening socket per client stack, so stacks that
run side by side each have their own host (and their own breaker) while sharing one schedule.
Each request gets a tiny fixed response or, as the schedule's current phase says, a 503, a
connection reset, no answer at all (a hang), or its answer late. With recording on, every request
is logged as a ``Hit``, and the loop's own lateness is tracked, so a run can show that the
upstream kept up with what it was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any, NamedTuple

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n"
    b"\r\nunavailable"
)
CALL_ID_HEADER = "X-Call-Id"
_CALL_ID = b"\r\n" + CALL_ID_HEADER.lower().encode() + b":"
RESET = 0
HANG = -1
# How often the loop checks its own lateness: a late tick means requests waited on the upstream.
_TICK = 0.01
# SO_LINGER on, zero seconds: close() sends RST instead of FIN, as a crashing upstream does.
_LINGER_RESET = struct.pack("ii", 1, 0)


@dataclass(frozen=True, slots=True)
class Phase:
    """From ``at`` seconds after the schedule starts: the share of requests that fail, and how.

    ``fail`` 0 is healthy, 1 a full outage, anything between a brownout; ``reset`` fails by
    resetting the connection instead of answering 503, ``hang`` by reading the request and never
    answering it. ``latency`` delays every answer by that many seconds, and a ``slow`` share
    of the answers, drawn at random, by ``slow_latency`` instead.
    """

    at: float
    fail: float
    reset: bool = False
    hang: bool = False
    latency: float = 0.0
    slow: float = 0.0
    slow_latency: float = 0.0


class Hit(NamedTuple):
    """One request the upstream saw: when (``time.monotonic()``, shared by every process on
    Linux), on which stack's port, for which call, and what it answered (0 for a reset, -1 for
    a request it never answered)."""

    at: float
    stack: int
    call_id: int
    status: int


class _State:
    def __init__(self) -> None:
        self.started_at = float("inf")
        self.phases: tuple[tuple[Phase, ...], ...] = ()
        self.rng = random.Random(0)
        self.record = False
        self.hits: list[Hit] = []
        self.lag = 0.0  # the loop's worst lateness since the last schedule or collect

    def phase(self, stack: int, now: float) -> Phase | None:
        if stack >= len(self.phases):
            return None
        current = None
        for phase in self.phases[stack]:
            if now - self.started_at >= phase.at:
                current = phase
        return current

    def answer(self, stack: int, head: bytes) -> tuple[int, float]:
        """The status to answer with (or RESET, HANG) and how long to wait before answering."""
        now = time.monotonic()
        phase = self.phase(stack, now)
        status = 200
        if phase is not None and phase.fail > 0 and self.rng.random() < phase.fail:
            status = RESET if phase.reset else HANG if phase.hang else 503
        if self.record:
            self.hits.append(Hit(now, stack, _call_id(head), status))
        if phase is None:
            return status, 0.0
        # Drawn only when a slow share is set, so the storm's draws are as they were.
        if phase.slow > 0 and self.rng.random() < phase.slow:
            return status, phase.slow_latency
        return status, phase.latency


def _call_id(head: bytes) -> int:
    start = head.lower().find(_CALL_ID)
    if start < 0:
        return -1
    end = head.find(b"\r\n", start + 2)
    try:
        return int(head[start + len(_CALL_ID) : end if end >= 0 else None])
    except ValueError:
        return -1


class _Handler(asyncio.Protocol):
    def __init__(self, state: _State, stack: int) -> None:
        self._state = state
        self._stack = stack
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        assert transport is not None
        self._buffer += data
        # The clients send GETs without bodies: a request ends at the blank line.
        while (end := self._buffer.find(b"\r\n\r\n")) >= 0:
            head, self._buffer = self._buffer[:end], self._buffer[end + 4 :]
            status, latency = self._state.answer(self._stack, head)
            if status == RESET:
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                transport.abort()
                return
            if status == HANG:
                # Read and held: the connection stays open until the client gives up on it.
                continue
            body = OK if status == 200 else UNAVAILABLE
            if latency > 0:
                asyncio.get_running_loop().call_later(latency, _write, transport, body)
            else:
                transport.write(body)


def _write(transport: asyncio.Transport, body: bytes) -> None:
    # A client that timed out meanwhile has closed the connection: nothing to answer.
    if not transport.is_closing():
        transport.write(body)


def _serve(conn: Connection, stacks: int, lifetime: float) -> None:
    asyncio.run(_main(conn, stacks, lifetime))


async def _main(conn: Connection, stacks: int, lifetime: float) -> None:
    loop = asyncio.get_running_loop()
    state = _State()
    servers = []
    for stack in range(stacks):
        server = await loop.create_server(
            lambda stack=stack: _Handler(state, stack),  # type: ignore[misc]
            "127.0.0.1",
            0,
            backlog=1024,
        )
        servers.append(server)
    conn.send([server.sockets[0].getsockname()[1] for server in servers])
    done: asyncio.Future[None] = loop.create_future()

    def on_message() -> None:
        try:
            kind, *args = conn.recv()
        except (EOFError, OSError):
            kind, args = "stop", []
        if kind == "schedule":
            started_at, phases, seed, record = args
            state.started_at, state.phases = started_at, tuple(map(tuple, phases))
            state.rng, state.record, state.hits = random.Random(seed), record, []
            state.lag = 0.0
        elif kind == "collect":
            conn.send((state.hits, state.lag))
            state.hits, state.lag = [], 0.0
        elif not done.done():
            done.set_result(None)

    loop.add_reader(conn.fileno(), on_message)
    watch = asyncio.ensure_future(_watch_lag(state, done))
    # Bounded: the upstream stops by itself even if the parent never says so.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done, timeout=lifetime)
    watch.cancel()
    loop.remove_reader(conn.fileno())
    for server in servers:
        server.close()


async def _watch_lag(state: _State, done: asyncio.Future[None]) -> None:
    expected = time.monotonic() + _TICK
    while not done.done():
        await asyncio.sleep(_TICK)
        now = time.monotonic()
        state.lag = max(state.lag, now - expected)
        expected = now + _TICK


class Upstream:
    """The upstream process, seen from the benchmark.

    Example::

        with Upstream(stacks=2) as upstream:
            upstream.schedule(time.monotonic(), [[], [Phase(0, 0.0), Phase(2, 1.0)]])
            requests.get(upstream.url(0))
            hits = upstream.collect()
    """

    def __init__(self, stacks: int = 1, lifetime: float = 600.0) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        # The loop's worst lateness over the hits the last collect() returned, in seconds.
        self.loop_lag = 0.0
        self._process = context.Process(
            target=_serve, args=(child, stacks, lifetime), name="upstream", daemon=True
        )
        self._process.start()
        child.close()
        try:
            if not self._conn.poll(30):
                raise EOFError
            self.ports: list[int] = self._conn.recv()
        except EOFError:
            self.close()
            raise RuntimeError("the upstream process did not start") from None

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def url(self, stack: int = 0, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.ports[stack]}{path}"

    def schedule(
        self,
        started_at: float,
        phases: Sequence[Sequence[Phase]],
        *,
        seed: int = 0,
        record: bool = True,
    ) -> None:
        """From the ``time.monotonic()`` instant *started_at*, stack ``i`` follows
        ``phases[i]`` (healthy where none is given); clears the recorded hits."""
        self._conn.send(("schedule", started_at, phases, seed, record))

    def collect(self) -> list[Hit]:
        """Every hit recorded since the last schedule or collect."""
        self._conn.send(("collect",))
        if not self._conn.poll(30):
            raise RuntimeError("the upstream did not answer")
        hits: list[Any]
        hits, self.loop_lag = self._conn.recv()
        return [Hit(*hit) for hit in hits]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(("stop",))
        self._process.join(5)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(5)
        self._conn.close()

    def __enter__(self) -> Upstream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
