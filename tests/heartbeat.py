"""A heartbeat task: how late an event loop runs a task that asks to run every few ms, told
apart from what no code on the loop can help: the loop's thread waiting for a core (the
kernel's count of it), and the whole process pausing (a thread that ticks beside it)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from resilient_session.clock import SYSTEM_CLOCK

# (due, came): the instant a tick asked for and the instant it came.
Tick = tuple[float, float]
# Linux: the calling thread's time on a run queue, runnable but waiting for a core (ns).
_SCHEDSTAT = "/proc/thread-self/schedstat"


def _queued() -> float:
    """Seconds the calling thread has spent waiting for a core; 0 where the kernel says not."""
    try:
        with open(_SCHEDSTAT, encoding="ascii") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class Heartbeat:
    """Ticks every *period* seconds on the loop until stopped, keeping each tick: a loop that
    something blocks shows it as a late tick. Beside each, the seconds the loop's thread
    spent waiting for a core meanwhile, which a busy machine costs it whatever runs there."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.ticks: list[Tick] = []
        self.queued: list[float] = []
        self._stop = anyio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            queued = _queued()
            due = SYSTEM_CLOCK.monotonic() + self.period
            await anyio.sleep(self.period)
            self.ticks.append((due, SYSTEM_CLOCK.monotonic()))
            self.queued.append(_queued() - queued)

    def stop(self) -> None:
        self._stop.set()

    @property
    def lags(self) -> list[float]:
        return [came - due for due, came in self.ticks]

    @property
    def worst(self) -> float:
        """The latest tick's lateness, in seconds."""
        return max(self.lags, default=0.0)


class ProcessTicks:
    """A thread of the same process ticking every *period* seconds with a blocking sleep: late
    when the whole process was (the machine's scheduler, a collection, a thread keeping the
    interpreter), on time when only the loop's thread was held."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.ticks: list[Tick] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-ticks", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            due = SYSTEM_CLOCK.monotonic() + self.period
            self._stop.wait(self.period)
            self.ticks.append((due, SYSTEM_CLOCK.monotonic()))

    def __enter__(self) -> ProcessTicks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def late_during(self, began: float, ended: float) -> float:
        """How late this thread's ticks that overlap [*began*, *ended*] came, at most."""
        return max(
            (came - due for due, came in self.ticks if came >= began and due <= ended),
            default=0.0,
        )


def loop_held(heartbeat: Heartbeat, process: ProcessTicks, over: float) -> list[float]:
    """The loop's ticks late by more than *over* beyond what the machine and the interpreter
    cost it meanwhile (the longer of the loop's thread's wait for a core and the process's
    own thread's lateness): the loop held by what ran on it, as a blocking call holds it."""
    return [
        round(came - due, 4)
        for (due, came), queued in zip(heartbeat.ticks, heartbeat.queued, strict=True)
        if came - due - max(queued, process.late_during(due, came)) > over
    ]


@contextmanager
def heap_frozen() -> Iterator[None]:
    """The test run's heap left out of the collector while a heartbeat is measured.

    A full collection of everything pytest and the suite's imports made pauses the whole
    process for 20 to 40 ms on these machines, whatever runs: the interpreter's pause, not the
    code under test's. Frozen (``gc.freeze``, as a latency-minded service does after start-up),
    a collection sees only what was made since.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
