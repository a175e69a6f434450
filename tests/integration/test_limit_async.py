"""One concurrency limit for threads and tasks, in real time: many of each share its slots and
wake each other, across two event loops too; cancelled waits leak nothing; a waiting task
never blocks its loop."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from resilient_session._state.limit import ConcurrencyLimit, LimitSnapshot, Signal
from resilient_session._state.wakeup import TaskWakeup
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.config.policy import LimitPolicy
from tests.heartbeat import Heartbeat, ProcessTicks, heap_frozen, loop_held
from tests.threads import run_together

pytestmark = pytest.mark.integration

HOST = "http://svc.test:80"
SLOTS = 4


class Flight:
    """Counts the tries holding a slot, by the holders themselves, and the most at once; and
    how the waits went."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.tries = 0
        self.refused = 0
        self.longest_wait = 0.0
        self.thread_waits = 0
        self.task_waits = 0

    def enter(self, waited: float) -> None:
        with self.lock:
            self.now += 1
            self.tries += 1
            self.peak = max(self.peak, self.now)
            self.longest_wait = max(self.longest_wait, waited)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


def counted_limit(flight: Flight, max_wait: float) -> ConcurrencyLimit:
    """A fixed limit of SLOTS on the system clock whose thread and task waits are counted, and
    really wait: a thread on the condition, a task on its wake-up."""

    def thread_waits(condition: threading.Condition, seconds: float) -> None:
        flight.thread_waits += 1  # under the limit's lock
        condition.wait(seconds)

    async def task_waits(wakeup: TaskWakeup, seconds: float) -> None:
        with flight.lock:
            flight.task_waits += 1
        await wakeup.wait(seconds)

    policy = LimitPolicy(initial=SLOTS, min=SLOTS, max=SLOTS, max_wait=max_wait)
    return ConcurrencyLimit(HOST, policy, SYSTEM_CLOCK, thread_waits, task_waits)


def thread_tries(limit: ConcurrencyLimit, flight: Flight, tries: int) -> Callable[[int], None]:
    pause = threading.Event()  # never set: its wait holds the slot with the GIL released

    def body(index: int) -> None:
        for _ in range(tries):
            began = SYSTEM_CLOCK.monotonic()
            if not limit.acquire(None):
                with flight.lock:
                    flight.refused += 1
                continue
            flight.enter(SYSTEM_CLOCK.monotonic() - began)
            try:
                pause.wait(0.001)
            finally:
                flight.leave()
                limit.release(Signal.IGNORE)

    return body


def task_tries(
    limit: ConcurrencyLimit, flight: Flight, tries: int
) -> Callable[[], Coroutine[Any, Any, None]]:
    async def body() -> None:
        for _ in range(tries):
            began = SYSTEM_CLOCK.monotonic()
            if not await limit.aacquire(None):
                with flight.lock:
                    flight.refused += 1
                continue
            flight.enter(SYSTEM_CLOCK.monotonic() - began)
            try:
                await anyio.sleep(0.001)
            finally:
                flight.leave()
                limit.release(Signal.IGNORE)

    return body


async def run_tasks(count: int, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            for _ in range(count):
                tasks.start_soon(body)


def assert_settled(limit: ConcurrencyLimit) -> None:
    """Nothing held, nobody waiting, no wake-up left behind."""
    assert limit.snapshot().in_flight == 0
    assert (limit._waiting, len(limit._tasks_waiting or ())) == (0, 0)


@pytest.mark.anyio
async def test_threads_and_tasks_share_the_slots_and_wake_each_other(anyio_backend):
    """16 threads and 48 tasks, 25 tries each, on a limit of 4 slots with a 10 s max_wait:
    never more than 4 in flight, none refused, both kinds waited and were woken by the other
    kind's releases (no wait near max_wait), and the flight ends at 0."""
    flight = Flight()
    limit = counted_limit(flight, max_wait=10.0)
    threads = threading.Thread(target=run_together, args=(16, thread_tries(limit, flight, 25)))
    threads.start()
    try:
        await run_tasks(48, task_tries(limit, flight, 25))
    finally:
        await anyio.to_thread.run_sync(threads.join, 60)
    assert not threads.is_alive()
    assert (flight.tries, flight.refused, flight.peak) == (64 * 25, 0, SLOTS)
    assert flight.thread_waits > 0
    assert flight.task_waits > 0
    assert flight.longest_wait < 5.0
    assert limit.snapshot() == LimitSnapshot(SLOTS, 0, 0)
    assert_settled(limit)


def test_an_asyncio_loop_a_trio_loop_and_threads_share_one_limit():
    """An asyncio loop and a trio loop, each in a thread of its own with 24 tasks, beside 8
    threads, 20 tries each, on one limit of 4: a slot freed on one loop wakes a task of the
    other, as a thread's does; none refused, at most 4 at once, nothing left behind."""
    flight = Flight()
    limit = counted_limit(flight, max_wait=10.0)
    failures: list[BaseException] = []

    def loop(backend: str) -> None:
        try:
            anyio.run(run_tasks, 24, task_tries(limit, flight, 20), backend=backend)
        except BaseException as error:  # noqa: BLE001 - carried to the test's thread
            failures.append(error)

    loops = [threading.Thread(target=loop, args=(name,)) for name in ("asyncio", "trio")]
    for thread in loops:
        thread.start()
    run_together(8, thread_tries(limit, flight, 20))
    for thread in loops:
        thread.join(timeout=60)
    assert failures == []
    assert not any(thread.is_alive() for thread in loops)
    assert (flight.tries, flight.refused, flight.peak) == ((48 + 8) * 20, 0, SLOTS)
    assert flight.task_waits > 0
    assert flight.longest_wait < 5.0
    assert_settled(limit)


@pytest.mark.anyio
async def test_cancelled_waits_leak_no_slot_while_threads_and_tasks_churn(anyio_backend):
    """200 tasks try once each under a cancel scope of 0 to 20 ms, beside 8 threads trying
    30 times on a limit of 4: many waits are cancelled, some of them after their wake-up
    came; afterwards nothing is in flight, nobody waits, and all 4 slots are free."""
    flight = Flight()
    limit = counted_limit(flight, max_wait=10.0)
    rng = random.Random(7)
    cancelled = [0]

    async def impatient() -> None:
        with anyio.move_on_after(rng.uniform(0.0, 0.02)) as scope:
            if await limit.aacquire(None):
                flight.enter(0.0)
                try:
                    await anyio.sleep(0.002)
                finally:
                    flight.leave()
                    limit.release(Signal.IGNORE)
        if scope.cancelled_caught:
            cancelled[0] += 1

    threads = threading.Thread(target=run_together, args=(8, thread_tries(limit, flight, 30)))
    threads.start()
    try:
        await run_tasks(200, impatient)
    finally:
        await anyio.to_thread.run_sync(threads.join, 60)
    assert cancelled[0] >= 20
    assert flight.peak <= SLOTS
    assert_settled(limit)
    for _ in range(SLOTS):
        assert await limit.aacquire(None)
    assert limit.snapshot().in_flight == SLOTS


@pytest.mark.anyio
async def test_tasks_cancelled_while_waiting_leave_the_slots_to_waiting_threads(anyio_backend):
    """4 threads hold the 4 slots, 100 tasks and 4 more threads wait; the tasks are cancelled,
    then the holders finish: each waiting thread gets a slot within a second, and once they
    are done the flight is 0 with no waiter left."""
    limit = counted_limit(Flight(), max_wait=30.0)
    finish = threading.Event()
    got: list[float] = []

    def holder() -> None:
        assert limit.acquire(None)
        finish.wait(30)
        limit.release(Signal.IGNORE)

    def waiter() -> None:
        assert limit.acquire(None)
        got.append(SYSTEM_CLOCK.monotonic())
        limit.release(Signal.IGNORE)

    holders = [threading.Thread(target=holder) for _ in range(SLOTS)]
    for thread in holders:
        thread.start()
    with anyio.fail_after(10):
        while limit.snapshot().in_flight < SLOTS:
            await anyio.sleep(0.005)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tasks:
            for _ in range(100):
                tasks.start_soon(limit.aacquire, None)
            with anyio.fail_after(10):
                while len(limit._tasks_waiting or ()) < 100:
                    await anyio.sleep(0.005)
            scope.cancel()
    waiters = [threading.Thread(target=waiter) for _ in range(SLOTS)]
    for thread in waiters:
        thread.start()
    with anyio.fail_after(10):
        while limit._waiting < SLOTS:
            await anyio.sleep(0.005)
    released_at = SYSTEM_CLOCK.monotonic()
    finish.set()
    for thread in [*holders, *waiters]:
        await anyio.to_thread.run_sync(thread.join, 30)
    assert len(got) == SLOTS
    assert max(got) - released_at < 1.0
    assert limit.snapshot() == LimitSnapshot(SLOTS, 0, 0)
    assert_settled(limit)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_task_waiting_for_a_slot_never_blocks_its_loop(backend):
    """A task waits its 0.3 s max_wait for a slot the limit's holders keep, then is refused;
    meanwhile a heartbeat task on the same loop, every 5 ms, is never held 20 ms (a blocking
    wait would hold it for the whole 0.3 s). The loop is the test's own (tests/heartbeat.py
    says why), and a thread beside it tells the whole process pausing."""
    limit = counted_limit(Flight(), max_wait=0.3)
    for _ in range(SLOTS):
        assert limit.acquire(None)

    async def wait_beside_a_heartbeat() -> tuple[bool, float, Heartbeat]:
        heartbeat = Heartbeat()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(heartbeat.run)
            # Ticking before the wait begins: trio starts tasks in an order of its choosing.
            await anyio.sleep(0.02)
            began = SYSTEM_CLOCK.monotonic()
            taken = await limit.aacquire(None)
            waited = SYSTEM_CLOCK.monotonic() - began
            heartbeat.stop()
        return taken, waited, heartbeat

    with heap_frozen(), ProcessTicks() as process:
        taken, waited, heartbeat = anyio.run(wait_beside_a_heartbeat, backend=backend)
    assert taken is False
    assert 0.28 <= waited < 1.0
    assert len(heartbeat.ticks) >= 30
    assert loop_held(heartbeat, process, 0.02) == [], heartbeat.worst
    assert limit.snapshot() == LimitSnapshot(SLOTS, SLOTS, 1)
