"""The concurrency limit for tasks: the same slots as threads, awaited on the fake clock, under
asyncio and trio; a cancelled wait takes nothing and passes on a wake-up it was handed."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from resilient_session._state.limit import (
    ConcurrencyLimit,
    LimitSnapshot,
    Signal,
    task_waiter_for,
)
from resilient_session._state.wakeup import TaskWakeup
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.config.policy import LimitPolicy
from resilient_session.testing import FakeClock

pytestmark = pytest.mark.anyio

HOST = "http://svc.test:80"


def make(clock: FakeClock, **policy: Any) -> ConcurrencyLimit:
    """A limit with the burst off unless asked for, as in test_limit.py."""
    policy.setdefault("initial_burst", policy.get("initial", LimitPolicy().initial))
    return ConcurrencyLimit(HOST, LimitPolicy(**policy), clock)


def hold(limit: ConcurrencyLimit, count: int) -> None:
    for _ in range(count):
        assert limit.acquire(None)


def tasks_waiting(limit: ConcurrencyLimit) -> int:
    return len(limit._tasks_waiting or ())


async def test_a_free_slot_is_taken_without_reading_the_clock(anyio_backend):
    """Four free slots: four tasks take them, the clock never read, no wait recorded."""

    class NoTime(FakeClock):
        def monotonic(self) -> float:
            raise AssertionError("the clock was read with a slot free")

    limit = make(NoTime(), initial=4)
    for _ in range(4):
        assert await limit.aacquire(None)
    assert limit.snapshot() == LimitSnapshot(4, 4, 0)


async def test_a_task_and_a_thread_hold_the_same_slots(anyio_backend, clock):
    """Two slots taken by a thread's acquire and two by tasks fill a limit of 4: a fifth task
    is refused after max_wait on the clock, and a slot a thread gives back is a task's."""
    limit = make(clock, initial=4, min=4, max_wait=0.25)
    hold(limit, 2)
    assert await limit.aacquire(None)
    assert await limit.aacquire(None)
    assert not limit.acquire(None)
    assert not await limit.aacquire(None)
    assert (clock.sleeps, limit.snapshot()) == ([0.25, 0.25], LimitSnapshot(4, 4, 2))
    limit.release(Signal.IGNORE)
    assert await limit.aacquire(None)
    assert limit.snapshot() == LimitSnapshot(4, 4, 2)


async def test_the_wait_ends_at_the_deadline_when_it_is_nearer(anyio_backend, clock):
    """max_wait 0.25 s, deadline 0.1 s away: the task waits 0.1 s of the clock's time."""
    limit = make(clock, initial=2, min=2, max_wait=0.25)
    hold(limit, 2)
    assert not await limit.aacquire(clock.now + 0.1)
    assert clock.sleeps == [pytest.approx(0.1)]


async def test_a_spent_deadline_is_refused_without_waiting(anyio_backend, clock):
    limit = make(clock, initial=2, min=2, max_wait=0.25)
    hold(limit, 2)
    assert not await limit.aacquire(clock.now)
    assert (clock.sleeps, limit.snapshot().limited) == ([], 1)


async def test_the_burst_raises_the_limit_for_a_task_as_for_a_thread(anyio_backend, clock):
    """No answer yet, initial 2, initial_burst 5: the third to the fifth task get a slot at
    once, the sixth waits max_wait and is refused."""
    limit = make(clock, initial=2, min=1, max=10, initial_burst=5, max_wait=0.5)
    taken = [await limit.aacquire(None) for _ in range(6)]
    assert taken == [True] * 5 + [False]
    assert (clock.sleeps, limit.snapshot()) == ([0.5], LimitSnapshot(5, 5, 1))


async def test_a_slot_freed_during_the_wait_admits_the_waiting_task(anyio_backend, clock):
    """The task waiter stands in for time passing: another try ends 0.05 s into the wait."""
    limit = make(clock, initial=3, min=3, max_wait=0.25)
    hold(limit, 3)

    async def another_try_ends(wakeup: TaskWakeup, seconds: float) -> None:
        clock.advance(0.05)
        limit.release(Signal.IGNORE)

    limit._task_waiter = another_try_ends
    assert await limit.aacquire(None)
    assert (clock.now - 1000.0, limit.snapshot()) == (
        pytest.approx(0.05),
        LimitSnapshot(3, 3, 0),
    )
    assert (limit._waiting, tasks_waiting(limit)) == (0, 0)


async def test_a_release_wakes_the_oldest_waiting_task(anyio_backend, clock):
    """Three tasks wait on a full limit of one (woken, not timed: each waits on its wake-up
    for up to a minute); three releases admit them in the order they came."""
    limit = make(clock, initial=1, min=1, max_wait=60.0)
    limit._task_waiter = lambda wakeup, seconds: wakeup.wait(seconds)
    hold(limit, 1)
    admitted: list[int] = []

    async def wait_for_slot(index: int) -> None:
        assert await limit.aacquire(None)
        admitted.append(index)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            for index in range(3):
                tasks.start_soon(wait_for_slot, index)
                await anyio.wait_all_tasks_blocked()
            assert tasks_waiting(limit) == 3
            for expected in ([0], [0, 1], [0, 1, 2]):
                limit.release(Signal.IGNORE)
                await anyio.wait_all_tasks_blocked()
                assert admitted == expected
    assert limit.snapshot() == LimitSnapshot(1, 1, 0)
    assert (limit._waiting, tasks_waiting(limit)) == (0, 0)


async def test_a_cancelled_wait_takes_nothing(anyio_backend, clock):
    """20 tasks wait on a full limit and are cancelled: no slot taken, no waiter left, nothing
    counted as limited, and the slots the holders give back are free for the next tasks."""
    limit = make(clock, initial=2, min=2, max_wait=60.0)
    limit._task_waiter = lambda wakeup, seconds: wakeup.wait(seconds)
    hold(limit, 2)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tasks:
            for _ in range(20):
                tasks.start_soon(limit.aacquire, None)
            await anyio.wait_all_tasks_blocked()
            assert (limit._waiting, tasks_waiting(limit)) == (20, 20)
            scope.cancel()
    assert scope.cancelled_caught
    assert (limit._waiting, tasks_waiting(limit)) == (0, 0)
    limit.release(Signal.IGNORE)
    limit.release(Signal.IGNORE)
    assert limit.snapshot() == LimitSnapshot(2, 0, 0)
    assert [await limit.aacquire(None) for _ in range(2)] == [True, True]


async def test_a_task_cancelled_after_its_wake_up_passes_it_on(anyio_backend, clock):
    """The oldest of two waiting tasks is handed the slot a release frees, and is cancelled
    before it runs: the wake-up goes to the other task, which takes the slot."""
    limit = make(clock, initial=1, min=1, max_wait=60.0)
    limit._task_waiter = lambda wakeup, seconds: wakeup.wait(seconds)
    hold(limit, 1)
    admitted: list[str] = []

    async def wait_for_slot(name: str, scope: anyio.CancelScope) -> None:
        with scope:
            assert await limit.aacquire(None)
            admitted.append(name)

    first, second = anyio.CancelScope(), anyio.CancelScope()
    # Without the wake-up passed on, the second task would wait its whole minute.
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait_for_slot, "first", first)
            await anyio.wait_all_tasks_blocked()
            tasks.start_soon(wait_for_slot, "second", second)
            await anyio.wait_all_tasks_blocked()
            limit.release(Signal.IGNORE)  # hands the first task the wake-up
            assert tasks_waiting(limit) == 1
            first.cancel()
    assert admitted == ["second"]
    assert limit.snapshot() == LimitSnapshot(1, 1, 0)
    assert (limit._waiting, tasks_waiting(limit)) == (0, 0)


async def test_the_system_clock_waits_on_the_wake_up_and_others_on_their_clock(
    anyio_backend, clock
):
    """A woken wake-up ends the system clock's wait at once; another clock sleeps (awaited)."""
    wakeup = TaskWakeup()
    assert wakeup.wake()
    with anyio.fail_after(5):
        await task_waiter_for(SYSTEM_CLOCK)(wakeup, 60.0)
    await task_waiter_for(clock)(TaskWakeup(), 0.5)
    assert clock.sleeps == [0.5]


def test_a_wake_up_needs_a_running_loop():
    """Made outside asyncio and trio, a wake-up says where it must be made."""
    with pytest.raises(RuntimeError, match="inside an asyncio or trio event loop"):
        TaskWakeup()
