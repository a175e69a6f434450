"""Awaited waits on the clock: the system clock's go through anyio, a FakeClock's and fast()'s
are recorded, under asyncio and trio alike."""

from __future__ import annotations

import anyio
import pytest

from resilient_session.clock import SYSTEM_CLOCK, Clock, SystemClock
from resilient_session.testing import FakeClock, fast

pytestmark = pytest.mark.anyio


async def test_fake_clock_records_an_awaited_sleep_and_moves_at_once(anyio_backend):
    """Two awaited sleeps land in ``sleeps`` beside a blocking one and move ``now`` by their
    sum, with no real time passed (a real one would fail this tier)."""
    clock = FakeClock()
    await clock.asleep(0.5)
    clock.sleep(0.25)
    await clock.asleep(2.0)
    assert (clock.sleeps, clock.now - 1_000.0) == ([0.5, 0.25, 2.0], 2.75)


async def test_fake_clock_gives_the_loop_no_turn(anyio_backend):
    """Another task started before the awaited sleep has not run when it returns: the order of
    a fake-clock test's tasks is the same under both loops."""
    clock = FakeClock()
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(other)
        await clock.asleep(1.0)
        ran.append("after the sleep")
    assert ran == ["after the sleep", "other"]


async def test_the_system_clock_sleeps_through_anyio(anyio_backend, monkeypatch):
    """``SystemClock.asleep`` awaits ``anyio.sleep`` with the seconds given, under the running
    loop (recorded here instead of slept)."""
    awaited: list[tuple[float, str]] = []

    async def record(seconds: float) -> None:
        import sniffio

        awaited.append((seconds, sniffio.current_async_library()))

    monkeypatch.setattr(anyio, "sleep", record)
    await SYSTEM_CLOCK.asleep(0.125)
    assert awaited == [(0.125, anyio_backend)]


async def test_fast_records_the_system_clocks_awaited_sleeps(anyio_backend, monkeypatch):
    """Under ``fast()`` an awaited sleep of the system clock is recorded in ``waits``, moves
    its readings on, and never reaches anyio; after it, anyio sleeps again."""
    awaited: list[float] = []

    async def record(seconds: float) -> None:
        awaited.append(seconds)

    monkeypatch.setattr(anyio, "sleep", record)
    with fast() as mode:
        before = SYSTEM_CLOCK.monotonic()
        await SYSTEM_CLOCK.asleep(30.0)
        moved = SYSTEM_CLOCK.monotonic() - before
    await SYSTEM_CLOCK.asleep(0.0)
    assert mode.waits == [30.0]
    assert moved >= 30.0
    assert awaited == [0.0]


def test_both_clocks_are_clocks():
    """The protocol is met, awaited sleep included (mypy checks the same assignment)."""
    clocks: list[Clock] = [SYSTEM_CLOCK, SystemClock(), FakeClock()]
    assert all(callable(clock.asleep) for clock in clocks)
