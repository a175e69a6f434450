"""Fleet state for async callers: nothing on a try's path blocks the event loop, neither a look
at the listener's socket that must wait for it, nor a Redis that stopped answering, nor
closing the registry; under asyncio and trio.

A heartbeat is measured on a loop the test runs itself (``anyio.run``): anyio's pytest plugin
runs trio as a guest of the test's thread, handing every wake-up across threads, which a
heartbeat would measure as well. A thread ticking beside it (``ProcessTicks``) tells the
loop's thread being held from the whole process pausing (the machine's scheduler, the
interpreter), which no library code can prevent."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest
import redis
from devservers.redis_server import RedisServer

from resilient_session import ResilientSession
from resilient_session._observe.hooks import StateChange
from resilient_session._state.breaker import TryResult
from resilient_session._state.fleet import inbox, push
from resilient_session._state.limit import Signal
from resilient_session._state.registry import HostRegistry
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.config import load
from resilient_session.testing.upstream import FlakyUpstream, Reply
from tests.heartbeat import Heartbeat, ProcessTicks, heap_frozen, loop_held

from .conftest import FAST_RETRY

pytestmark = [pytest.mark.integration, pytest.mark.httpx]

THRESHOLD = 5
BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])
# A heartbeat tick later than this, beyond the process's own pause, is the loop held.
HELD = 0.02


# -- the look at the listener's socket, on a socket pair ---------------------------------------


class _Socket:
    """What Inbox.watch reads of a PubSub: its connection's socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.connection = SimpleNamespace(_sock=sock)


@pytest.fixture
def unread() -> Iterator[Callable[..., inbox.Inbox]]:
    """``unread(take_after=None)``: an Inbox whose listener socket holds a byte unread, watched
    by a listener thread that takes in one opening *take_after* seconds after a try is held
    there, or never (None: a stalled listener)."""
    pairs: list[tuple[socket.socket, socket.socket]] = []
    threads: list[threading.Thread] = []
    done = threading.Event()

    def make(take_after: float | None = None) -> inbox.Inbox:
        ours, theirs = socket.socketpair()
        pairs.append((ours, theirs))
        look = inbox.Inbox()
        watching = threading.Event()

        def listener() -> None:
            look.watch(_Socket(ours))
            watching.set()
            if take_after is None:
                return
            until = SYSTEM_CLOCK.monotonic() + 5.0
            while not look._holding and SYSTEM_CLOCK.monotonic() < until and not done.is_set():
                SYSTEM_CLOCK.sleep(0.001)
            SYSTEM_CLOCK.sleep(take_after)
            look.took(followed=True)

        theirs.send(b"x")
        thread = threading.Thread(target=listener)
        thread.start()
        threads.append(thread)
        assert watching.wait(5.0)
        return look

    yield make
    done.set()
    for thread in threads:
        thread.join(5.0)
    for ours, theirs in pairs:
        ours.close()
        theirs.close()


def _timed(backend: str, look: Callable[[], Any]) -> tuple[float, Heartbeat, ProcessTicks]:
    """On a loop of *backend*: seconds *look* took, with a heartbeat ticking on the loop and a
    thread beside it meanwhile."""

    async def timed(heartbeat: Heartbeat) -> float:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(heartbeat.run)
            await anyio.sleep(0.02)
            began = SYSTEM_CLOCK.monotonic()
            await look()
            held = SYSTEM_CLOCK.monotonic() - began
            await anyio.sleep(0.02)
            heartbeat.stop()
        return held

    async def main() -> tuple[float, Heartbeat]:
        heartbeat = Heartbeat()
        return await timed(heartbeat), heartbeat

    with heap_frozen(), ProcessTicks() as process:
        held, heartbeat = anyio.run(main, backend=backend)
    return held, heartbeat, process


@BACKENDS
def test_a_task_held_for_an_opening_awaits_it_while_the_loop_runs_on(backend, unread):
    """A byte lies unread and the listener takes the opening in 30 ms after the task is held:
    the task is held that long, the loop's heartbeat (every 5 ms) is never held 20 ms, the
    hold is free (an opening followed) and nothing is left held."""
    look = unread(take_after=0.03)
    held, heartbeat, process = _timed(backend, look.aheed)
    assert 0.025 <= held < 2.0
    assert loop_held(heartbeat, process, HELD) == [], heartbeat.worst
    assert look._credit == pytest.approx(inbox._HEED_WITHIN)
    assert (look._holding, look._tasks_held, look._unread_seen) == (0, {}, False)


@BACKENDS
def test_a_stalled_listener_holds_a_task_for_the_credit_once(backend, unread):
    """The listener never reads: the first task is held for the 50 ms credit and pays it, the
    listener is then taken as stalled and the next task is not held; the heartbeat is never
    held 20 ms meanwhile."""
    look = unread(take_after=None)
    held, heartbeat, process = _timed(backend, look.aheed)
    assert 0.045 <= held < 1.0
    assert loop_held(heartbeat, process, HELD) == [], heartbeat.worst
    assert look._stalled
    assert look._credit <= 0.005
    again, _, _ = _timed(backend, look.aheed)
    assert again < 0.005


@BACKENDS
def test_the_blocking_look_on_a_loop_holds_the_whole_loop(backend, unread):
    """Why tasks have their own: heed() called on the loop, listener stalled, blocks it for
    the whole 50 ms hold, and the heartbeat is held that long while the process runs on."""
    look = unread(take_after=None)

    async def blocking() -> None:
        look.heed()

    held, heartbeat, process = _timed(backend, blocking)
    assert held >= 0.045
    assert max(loop_held(heartbeat, process, HELD), default=0.0) >= 0.04


@pytest.mark.anyio
async def test_a_task_cancelled_while_held_pays_what_it_waited_and_leaves_nothing(
    anyio_backend, unread
):
    """A task held by a stalled listener is cancelled after 20 ms: about 20 ms of the credit is
    spent, nothing is left held, and the listener is not taken as stalled on so short a wait:
    the next task is held for what is left of the credit."""
    look = unread(take_after=None)
    with anyio.move_on_after(0.02) as scope:
        await look.aheed()
    assert scope.cancelled_caught
    assert (look._holding, look._tasks_held, look._stalled) == (0, {}, False)
    assert 0.0 < look._credit <= inbox._HEED_WITHIN - 0.015
    began = SYSTEM_CLOCK.monotonic()
    await look.aheed()
    assert 0.01 <= SYSTEM_CLOCK.monotonic() - began < 1.0
    assert look._stalled


# -- a real redis-server paused, the listener stalled ----------------------------------------


def _config(url: str, prefix: str) -> dict[str, Any]:
    return {
        "defaults": {
            "retry": {**FAST_RETRY, "max_attempts": 1},
            "breaker": {"failure_threshold": THRESHOLD, "recovery_timeout": 30.0},
        },
        "state": {
            "backend": "redis",
            "url": url,
            "key_prefix": prefix,
            "sync_interval_ms": 50,
            "timeout_ms": 100,
        },
    }


class _StallOnPush:
    """A state hook that, told of an opening on the listener's thread, keeps that thread
    (as a slow hook would) until *release* is set."""

    def __init__(self, release: threading.Event) -> None:
        self._release = release
        self.stalled = threading.Event()

    def on_try(self, record: object, /) -> None:
        """Tries are not what this hook watches."""

    def on_transition(self, change: StateChange, /) -> None:
        if threading.current_thread().name == push.THREAD_NAME:
            self.stalled.set()
            self._release.wait(10.0)


def _wait_until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    """Poll *check* every 5 ms; fail the test past *timeout* seconds (a setup step: a sync
    to Redis, a push followed; 5 s was once too short on a machine loaded with other runs)."""
    until = SYSTEM_CLOCK.monotonic() + timeout
    while not check():
        if SYSTEM_CLOCK.monotonic() > until:
            raise AssertionError(f"not true within {timeout} s")
        SYSTEM_CLOCK.sleep(0.005)


class _Tries:
    """What a try of the async engine asks of the host's state, in the engine's order: the
    look at the listener's socket (awaited), the breaker, the limit (awaited), a real call
    with httpx's AsyncClient, the result to the breaker and the limit."""

    def __init__(self, registry: HostRegistry, client: httpx.AsyncClient) -> None:
        self._registry = registry
        self._client = client
        self.outcomes: list[str] = []
        self.longest_look = 0.0

    async def one(self, url: str) -> None:
        state = self._registry.for_url(url)
        breaker = state.breaker
        aheed = breaker.aheed
        assert aheed is not None
        began = SYSTEM_CLOCK.monotonic()
        await aheed()
        self.longest_look = max(self.longest_look, SYSTEM_CLOCK.monotonic() - began)
        permit, _ = breaker.closed_admission or breaker.allow()
        if permit is None:
            self.outcomes.append("open")
            return
        limit = state.limit
        if limit is not None and not await limit.aacquire(None):
            breaker.record(permit, TryResult.NEUTRAL, sent=False)
            self.outcomes.append("limited")
            return
        state.bucket.deposit()
        status = 0
        try:
            status = (await self._client.get(url)).status_code
        finally:
            if limit is not None:
                limit.release(Signal.SUCCESS if 0 < status < 500 else Signal.IGNORE)
            breaker.record(permit, TryResult.SUCCESS if 0 < status < 500 else TryResult.FAILURE)
        self.outcomes.append(str(status))


async def _load_then_close(
    registry: HostRegistry, opened: FlakyUpstream, healthy: FlakyUpstream
) -> tuple[Heartbeat, _Tries, float]:
    """8 tasks make tries for a second, a third each to *opened* and to *healthy*'s / and
    /flaky, then the registry is closed, a heartbeat ticking throughout: the heartbeat, the
    tries, and the seconds closing took."""
    heartbeat = Heartbeat()
    async with httpx.AsyncClient() as client, anyio.create_task_group() as tasks:
        tasks.start_soon(heartbeat.run)
        tries = _Tries(registry, client)
        paths = [opened.url("/"), healthy.url("/"), healthy.url("/flaky")]
        # Ticking before the first try looks: trio starts tasks in an order of its choosing.
        await anyio.sleep(0.02)

        async def caller(index: int) -> None:
            ends = SYSTEM_CLOCK.monotonic() + 1.0
            n = index
            while SYSTEM_CLOCK.monotonic() < ends:
                await tries.one(paths[n % 3])
                n += 1
                await anyio.sleep(0.005)

        async with anyio.create_task_group() as callers:
            for index in range(8):
                callers.start_soon(caller, index)
        closing = SYSTEM_CLOCK.monotonic()
        await registry.aclose()
        closed_in = SYSTEM_CLOCK.monotonic() - closing
        heartbeat.stop()
    return heartbeat, tries, closed_in


@BACKENDS
def test_a_paused_redis_and_a_stalled_listener_never_hold_the_loop(
    backend: str, own_redis: RedisServer, key_prefix: str
):
    """Another worker opens a host's breaker; this worker's listener follows the push and is
    then kept by a slow state hook, with more lying unread on its socket; then Redis is
    paused (SIGSTOP). For a second, 8 tasks make tries through the host's state (the async
    engine's path: look, breaker, limit, a real httpx call, results) to that host (refused,
    open) and to a healthy one whose /flaky path answers 503, so failures hurry a sync that
    Redis never answers; then the registry is closed, Redis still paused. A heartbeat task on
    the same loop, every 5 ms, is never held 20 ms, though one task was held at the socket
    for the 50 ms a blocking look would have held the loop."""
    release = threading.Event()
    hook = _StallOnPush(release)
    config = _config(own_redis.url, key_prefix)
    admin = redis.Redis.from_url(own_redis.url)
    registry = HostRegistry(load(config), try_hooks=[hook])
    other = ResilientSession(config)
    try:
        with FlakyUpstream() as opened, FlakyUpstream() as healthy:
            opened.script("/", Reply(503))
            healthy.script("/flaky", Reply(503))
            keys = [f"http://127.0.0.1:{up.port}" for up in (opened, healthy)]
            for up in (opened, healthy):
                registry.for_url(up.url("/"))
            channel = push.channel(key_prefix)
            _wait_until(
                lambda: (
                    set(keys) <= set(registry.backend.synced())  # type: ignore[attr-defined]
                    and int(dict(admin.pubsub_numsub(channel)).get(channel.encode(), 0)) == 2
                )
            )
            for _ in range(THRESHOLD):
                other.get(opened.url("/"))
            _wait_until(hook.stalled.is_set)
            admin.publish(channel, "junk")
            admin.publish(channel, "more junk")
            own_redis.pause()
            with heap_frozen(), ProcessTicks() as process:
                heartbeat, tries, closed_in = anyio.run(
                    _load_then_close, registry, opened, healthy, backend=backend
                )
        health = registry.health()
    finally:
        release.set()
        own_redis.resume()
        other.close()
        registry.close()
        admin.close()
    assert loop_held(heartbeat, process, HELD) == [], (heartbeat.worst, heartbeat.lags[-5:])
    assert len(heartbeat.ticks) >= 100
    assert tries.longest_look >= 0.045
    counts = {outcome: tries.outcomes.count(outcome) for outcome in set(tries.outcomes)}
    # The opened host refused every try; the healthy one answered until its 503s opened it.
    assert counts["open"] >= 20, counts
    assert counts["200"] >= 5, counts
    assert counts["503"] >= THRESHOLD, counts
    assert set(counts) == {"open", "200", "503"}, counts
    assert health[keys[0]].breaker.value == "open"
    assert health[keys[1]].in_flight == 0
    # Closing waited on the listener the hook kept, on a worker thread.
    assert closed_in >= 0.5
