"""Deadlines: the ``deadline()`` context manager and the contextvar that carries the instant."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .clock import SYSTEM_CLOCK, Clock


@dataclass(frozen=True, slots=True)
class DeadlineScope:
    """The earliest enclosing deadline (a ``clock.monotonic()`` instant) and whether the
    configured default deadline still applies beneath it."""

    at: float | None
    use_default: bool = True


_SCOPE: contextvars.ContextVar[DeadlineScope | None] = contextvars.ContextVar(
    "resilient_session_deadline", default=None
)


# The deadline scope in force here, if any; the contextvar's own getter, as it is read per call.
current_scope: Callable[[], DeadlineScope | None] = _SCOPE.get


@contextmanager
def deadline(seconds: float | None, *, clock: Clock = SYSTEM_CLOCK) -> Iterator[None]:
    """Bound every call made inside the block to *seconds* from now.

    Nested blocks keep the earliest deadline. ``None`` adds no deadline of its own and
    switches off the configured default deadline for calls inside the block. The deadline
    lives in a contextvar: code run in a new thread or a thread pool does not inherit it
    unless the context is copied (``contextvars.copy_context().run``).

    Example::

        with deadline(2.0):
            session.get(url)          # every try, wait and redirect shares the same 2 s
    """
    outer = _SCOPE.get()
    if seconds is None:
        scope = DeadlineScope(outer.at if outer else None, use_default=False)
    else:
        if seconds != seconds or seconds <= 0:
            raise ValueError(f"deadline must be a positive number of seconds, got {seconds!r}")
        at = clock.monotonic() + seconds
        if outer is not None and outer.at is not None:
            at = min(at, outer.at)
        scope = DeadlineScope(at, use_default=outer.use_default if outer else True)
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def remaining(*, clock: Clock = SYSTEM_CLOCK) -> float | None:
    """Seconds left before the enclosing deadline, or None when there is none."""
    scope = _SCOPE.get()
    if scope is None or scope.at is None:
        return None
    return scope.at - clock.monotonic()
