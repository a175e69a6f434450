"""Where every state change is reported: the ``breaker.transition`` and ``state.*`` events
first, then each state hook. The registry builds one and hands it to its state backend, so
``_state`` reports through it and never emits an event itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from .events import emit_state_change, emit_transition
from .hooks import BackendChange, BackendHook, StateChange, StateHook


class StateReport:
    """The state hooks of one registry; with none, the events alone."""

    __slots__ = ("_backend_watchers", "_watchers")

    def __init__(self, hooks: Iterable[object] = ()) -> None:
        kept = tuple(hooks)
        self._watchers = tuple(hook for hook in kept if isinstance(hook, StateHook))
        self._backend_watchers = tuple(hook for hook in kept if isinstance(hook, BackendHook))

    def transition(self, change: StateChange) -> None:
        """A breaker state change; called with no lock held."""
        emit_transition(change)
        for watcher in self._watchers:
            watcher.on_transition(change)

    def backend(self, change: BackendChange) -> None:
        """The backend degraded, was restored or corrected a value; called with no lock held."""
        emit_state_change(change.event, **change.event_fields())
        for watcher in self._backend_watchers:
            watcher.on_state(change)

    def tell(self, changes: Iterable[StateChange | BackendChange]) -> None:
        """Each of *changes* in turn: what a sync noted while it held its lock. On the sync
        thread, so a hook that raises costs the other changes nothing: each is its own try."""
        for change in changes:
            with contextlib.suppress(Exception):
                if isinstance(change, BackendChange):
                    self.backend(change)
                else:
                    self.transition(change)


# What a backend built without a registry reports to: the events alone.
EVENTS_ONLY = StateReport()
