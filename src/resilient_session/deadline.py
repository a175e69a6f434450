"""Deadlines: the ``deadline()`` context manager and the contextvar that carries the instant."""

from __future__ import annotations

import contextvars
import numbers
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from .clock import SYSTEM_CLOCK, Clock

# The longest deadline accepted: about 31 years. Each try's timeouts are clamped to what is
# left, and sockets and locks take at most about 9.2e9 s (64-bit nanoseconds); a longer
# "deadline" would fail deep inside a try instead of here, where the caller wrote it.
MAX_DEADLINE: Final = 1e9


class CallSpan:
    """When one call began, and the earliest instant a configured default deadline ends it.

    ``ResilientSession.request`` opens one per call when a host of its config has a
    ``deadline.default``; each redirect hop measures its host's default from the call's
    start, and a hop can only narrow what an earlier hop's host set. A call runs its hops one
    after another on one thread, so nothing here needs a lock.
    """

    __slots__ = ("default_at", "started_at")

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        self.default_at: float | None = None

    def default_ends(self, default: float | None) -> float | None:
        """The instant the call's default deadline ends it, for a hop to a host whose
        ``deadline.default`` is *default* (None: the host sets none)."""
        if default is not None:
            at = self.started_at + default
            if self.default_at is None or at < self.default_at:
                self.default_at = at
        return self.default_at


@dataclass(frozen=True, slots=True)
class DeadlineScope:
    """The earliest enclosing deadline (a ``clock.monotonic()`` instant), whether the
    configured default deadline still applies beneath it, and the call it was opened for."""

    at: float | None
    use_default: bool = True
    # Set only by a call that opens its own scope for the configured default (call_scope).
    span: CallSpan | None = None


_SCOPE: contextvars.ContextVar[DeadlineScope | None] = contextvars.ContextVar(
    "resilient_session_deadline", default=None
)


# The deadline scope in force here, if any; the contextvar's own getter, as it is read per call.
current_scope: Callable[[], DeadlineScope | None] = _SCOPE.get


def checked(seconds: object) -> float | None:
    """*seconds* as a float, or None; raises for anything a deadline cannot be.

    Raises:
        TypeError: not a number (``bool`` is not a number here) and not None.
        ValueError: zero, negative, NaN, infinite, or above ``MAX_DEADLINE``.
    """
    kind = type(seconds)
    if kind is not float and kind is not int:  # the common cases skip the ABC check
        if seconds is None:
            return None
        # numbers.Number takes Decimal and Fraction too; complex fails float() below.
        if kind is bool or not isinstance(seconds, numbers.Number):
            raise _not_a_number(seconds)
    try:
        value = float(seconds)  # type: ignore[arg-type]  # a number, checked above
    except OverflowError:  # an int past float's range
        value = float("inf")
    except TypeError:
        raise _not_a_number(seconds) from None
    # Written so that NaN fails it too: every comparison with NaN is False.
    if not 0 < value <= MAX_DEADLINE:
        raise ValueError(
            f"deadline must be a positive number of seconds up to {MAX_DEADLINE:g}, got {seconds!r}"
        )
    return value


def _not_a_number(seconds: object) -> TypeError:
    return TypeError(
        f"deadline must be a number of seconds or None, got {seconds!r} ({type(seconds).__name__})"
    )


def narrowed(seconds: float | None, clock: Clock, *, explicit: bool) -> DeadlineScope:
    """The scope for a new deadline of *seconds* inside the one in force.

    An enclosing scope always caps the new one. *explicit* is a call's own ``deadline=``, which
    replaces the configured default; a ``with deadline()`` block keeps it, unless given None.
    """
    outer = _SCOPE.get()
    outer_at = outer.at if outer is not None else None
    value = checked(seconds)
    if value is None:
        return DeadlineScope(outer_at, use_default=False)
    at = clock.monotonic() + value
    if outer_at is not None and outer_at < at:
        at = outer_at
    use_default = not explicit and (outer.use_default if outer is not None else True)
    return DeadlineScope(at, use_default=use_default)


def call_scope(clock: Clock) -> DeadlineScope:
    """The scope of one call under the configured default deadline: the enclosing deadline,
    and a span that starts now, so the default covers every redirect hop of the call. The
    enclosing scope as it is where it switched the default off (``with deadline(None)``)."""
    outer = _SCOPE.get()
    if outer is None:
        return DeadlineScope(None, span=CallSpan(clock.monotonic()))
    if not outer.use_default:
        return outer
    return DeadlineScope(outer.at, span=CallSpan(clock.monotonic()))


def enter(scope: DeadlineScope) -> contextvars.Token[DeadlineScope | None]:
    """Put *scope* in force until ``leave(token)``; cheaper per call than a context manager."""
    return _SCOPE.set(scope)


leave: Callable[[contextvars.Token[DeadlineScope | None]], None] = _SCOPE.reset


@contextmanager
def deadline(seconds: float | None, *, clock: Clock = SYSTEM_CLOCK) -> Iterator[None]:
    """Bound every call made inside the block to *seconds* from now.

    Nested blocks keep the earliest deadline, and so does a call's own ``deadline=`` inside the
    block. ``None`` adds no deadline of its own and switches off the configured default
    deadline for calls inside the block. The deadline lives in a contextvar: code run in a new
    thread or a thread pool does not inherit it unless the context is copied
    (``contextvars.copy_context().run``).

    Args:
        seconds: a positive, finite number of seconds (at most ``MAX_DEADLINE``), or None.
        clock: the source of time.

    Raises:
        TypeError: *seconds* is not a number (``True`` is not) and not None.
        ValueError: *seconds* is zero, negative, NaN, infinite or too large.

    Example::

        with deadline(2.0):
            session.get(url)          # every try, wait and redirect shares the same 2 s
    """
    token = _SCOPE.set(narrowed(seconds, clock, explicit=False))
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
