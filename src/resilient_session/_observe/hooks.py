"""The per-try seam: what a finished try was, and the hooks that are told.

The ``http.try`` event is the first user of this seam, the OpenTelemetry emitter
(``_observe/otel.py``) another, and a user's own hook (a Prometheus client, a test spy) is
one more: each is handed the same frozen :class:`TryRecord` once per try.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from typing import NamedTuple, Protocol, runtime_checkable


class TryRecord(NamedTuple):
    """One finished try, sent or refused locally, as every hook sees it.

    The first twelve fields are the ``http.try`` event's, in its order and with its values;
    the event also carries ``hedge`` on a hedge's try, where it is true.
    """

    method: str
    # Redacted as the events redact it: no secret query value, no userinfo.
    url: str
    # ``scheme://host:port``, the host spelled canonically: the key of the host's state.
    host: str
    # The pattern of the host's route the try's path is in (``hosts:`` ... ``routes:``), whose
    # state it ran under; None when it ran under the host's own.
    route: str | None
    attempt: int
    status: int | None
    # The class name of the exception the try ended with, if any.
    error: str | None
    wait: float
    # Seconds since the call began, on the session's clock.
    total: float
    decision: str
    reason: str
    breaker: str | None
    # True for a hedge: a try a hedged call sent while its first try was still out.
    hedge: bool
    # The try's start and end on the session's clock (``monotonic``).
    started: float
    ended: float
    # Set when the try was refused locally and never sent: the reason that refused it
    # (``breaker_open``, ``throttled``, ``concurrency_limit``, ``deadline_spent``).
    refused: str | None

    def event_fields(self) -> dict[str, object]:
        """The fields of the ``http.try`` event."""
        fields: dict[str, object] = dict(zip(_EVENT_FIELDS, self, strict=False))
        if self.hedge:
            fields["hedge"] = True
        return fields


_EVENT_FIELDS = TryRecord._fields[:12]


class TrySending(NamedTuple):
    """A try about to leave: what a :class:`SendHook` can name in the headers it adds."""

    method: str
    url: str
    host: str
    attempt: int
    # The host's route whose state the try runs under, as in ``TryRecord``; None for none.
    route: str | None = None


@runtime_checkable
class TryHook(Protocol):
    """Told of every try once its decision is final; must not raise, and runs on the thread
    of the call, so it should be quick."""

    def on_try(self, record: TryRecord, /) -> None: ...


@runtime_checkable
class SendHook(TryHook, Protocol):
    """A hook that also sees each try just before it is sent, and may add headers to it (a
    trace context): only tries that leave reach ``on_send``, and its ``on_try`` follows on the
    same thread."""

    def on_send(self, sending: TrySending, /) -> Iterable[tuple[str, str]]: ...


@runtime_checkable
class CallEndHook(TryHook, Protocol):
    """A hook also told how a call that failed ended, when a fallback stage watches the call
    (``calls_watched()`` true while its tries run): ``on_call_end`` follows the call's last
    ``on_try`` on the same thread, with the source of the fallback that answered it
    (``stale`` or ``callable``), or None when none did."""

    def on_call_end(self, source: str | None, /) -> None: ...


_WATCHED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "resilient_session_call_watched", default=False
)

#: True while the tries of a call run under a fallback stage, which tells each
#: :class:`CallEndHook` how the call ended: the last try's span may wait for it.
calls_watched: Callable[[], bool] = _WATCHED.get


def watch_call() -> contextvars.Token[bool]:
    """Say, until ``unwatch_call(token)``, that ``on_call_end`` will follow the call's tries."""
    return _WATCHED.set(True)


unwatch_call: Callable[[contextvars.Token[bool]], None] = _WATCHED.reset


class _Named(Protocol):
    @property
    def value(self) -> str: ...


class StateChange(Protocol):
    """A breaker state change as the hooks and the event see it (the breaker's ``Transition``):
    neither names a guard, so the per-host state reports through them without a cycle."""

    @property
    def host(self) -> str: ...

    @property
    def route(self) -> str | None: ...

    @property
    def seq(self) -> int: ...

    @property
    def from_state(self) -> _Named: ...

    @property
    def to_state(self) -> _Named: ...


@runtime_checkable
class StateHook(Protocol):
    """A hook told of each breaker state change a try of this registry's sessions caused,
    after the ``breaker.transition`` event (``from_state.value`` to ``to_state.value``)."""

    def on_transition(self, change: StateChange, /) -> None: ...


class BackendChange(NamedTuple):
    """The shared state went out of reach (``state.degraded``), came back (``state.restored``)
    or held values no worker wrote (``state.corrected``), as every hook sees it."""

    event: str
    backend: str
    # The store's URL, its password hidden.
    url: str
    # The rest of the event's fields, in its order: ``error``, ``degraded_for``, or ``host``
    # and ``fields``.
    detail: tuple[tuple[str, str | float], ...] = ()

    def event_fields(self) -> dict[str, str | float]:
        """The fields of the event, its name left out."""
        return {"backend": self.backend, "url": self.url, **dict(self.detail)}


@runtime_checkable
class BackendHook(StateHook, Protocol):
    """A state hook also told when the state backend degrades, is restored, or corrects a
    value, after the ``state.*`` event. Those, and the breaker changes a worker adopts from
    the fleet, reach it on the backend's sync thread, never under a lock."""

    def on_state(self, change: BackendChange, /) -> None: ...
