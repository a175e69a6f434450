"""``fast()``: a whole test suite's retries wait no real time and draw the same waits each run.

While it is on, the system clock (``resilient_session.clock.SYSTEM_CLOCK``, what every
session uses unless given another) records each sleep instead of sleeping, and its readings
move on at once by what it skipped, as a ``FakeClock``'s do. Every decision is the one real
time would give: the tries made, the waits drawn, a deadline that a wait would have spent,
a Retry-After that does not fit. Sessions and adapters made while it is on draw their jitter
from ``random.Random(seed)``, so the waits repeat run after run.

It costs a call nothing while off: it replaces the system clock's methods on the class while
on and puts the originals back after. The skipped time is one total for the process, kept from
one ``fast()`` to the next, so a session that lives across tests sees its clock go forward
only; with ``fast()`` off, readings are real time again.
"""

from __future__ import annotations

import threading
from types import TracebackType

from resilient_session.clock import SYSTEM_CLOCK, SystemClock, fix_jitter_seed

__all__ = ["FastMode", "fast"]

_REAL = {name: SystemClock.__dict__[name] for name in ("monotonic", "wall", "sleep", "asleep")}
_real_monotonic = SYSTEM_CLOCK.monotonic
_real_wall = SYSTEM_CLOCK.wall

_lock = threading.Lock()
_skipped = 0.0
# The handles in force, innermost last.
_stack: list[FastMode] = []


def _monotonic() -> float:
    return _real_monotonic() + _skipped


def _wall() -> float:
    return _real_wall() + _skipped


def _sleep(seconds: float) -> None:
    global _skipped
    with _lock:
        _skipped += max(seconds, 0.0)
        for mode in _stack:
            if mode.on:
                mode.waits.append(seconds)


async def _asleep(seconds: float) -> None:
    # Recorded as a sleep is, without a turn of the event loop: as FakeClock's.
    _sleep(seconds)


_FAST = {
    "monotonic": staticmethod(_monotonic),
    "wall": staticmethod(_wall),
    "sleep": staticmethod(_sleep),
    "asleep": staticmethod(_asleep),
}


def _switch(on: bool) -> None:
    for name, method in (_FAST if on else _REAL).items():
        setattr(SystemClock, name, method)


class FastMode:
    """What one ``fast()`` call switched; as a context manager, its end sets back what was in
    force before it.

    Attributes:
        on: whether this call switched fast mode on (``fast(False)`` switches it off).
        seed: the seed of the jitter of sessions made while it is in force.
        waits: every wait skipped while it was in force, in seconds, in order.
    """

    def __init__(self, on: bool, seed: int) -> None:
        self.on = on
        self.seed = seed
        self.waits: list[float] = []
        with _lock:
            self._was_on = bool(_stack) and _stack[-1].on
            self._seed_before = fix_jitter_seed(seed if on else None)
            _stack.append(self)
            _switch(on)

    def restore(self) -> None:
        """Set back what was in force before this call; a second restore does nothing."""
        with _lock:
            if self not in _stack:
                return
            _stack.remove(self)
            fix_jitter_seed(self._seed_before)
            _switch(self._was_on)

    def __enter__(self) -> FastMode:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()


def fast(on: bool = True, *, seed: int = 0) -> FastMode:
    """Switch fast mode on (or off, with ``on=False``) for every session, at once.

    Use it for a whole suite (once, in ``conftest.py``) or as ``with fast():`` around a test:
    a 503, 503, 200 call still makes three tries, and its two waits are recorded in
    ``FastMode.waits`` instead of slept. Restores nest: end them innermost first.

    Example::

        # conftest.py
        import pytest
        from resilient_session.testing import fast

        @pytest.fixture(autouse=True)
        def _no_backoff_waits():
            with fast():
                yield
    """
    return FastMode(on, seed)
