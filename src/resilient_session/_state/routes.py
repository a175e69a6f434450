"""The routes of one host (``hosts:`` ... ``routes:``) and the state of each route used so far:
made on a route's first call, as a host's state is made on the host's."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

from resilient_session.config.route import Route, route_for

State = TypeVar("State")


class RouteStates(Generic[State]):
    """A host's routes, in the order a path is tried against them, and each route's state.

    A route's state is read without a lock (one dict read, atomic under the GIL); its lock is
    held only to keep the first of two states made at once for one route, as the registry's
    is for a host.
    """

    __slots__ = ("_lock", "_states", "routes")

    def __init__(self, routes: tuple[Route, ...]) -> None:
        self.routes = routes
        self._states: dict[str, State] = {}
        self._lock = threading.Lock()

    def find(self, path: str) -> Route | None:
        """The route *path* is in, longest pattern first; None when it is in none."""
        return route_for(self.routes, path)

    def get(self, route: Route) -> State | None:
        """The state of *route*, if a call made it already."""
        return self._states.get(route.pattern)

    def keep(self, route: Route, fresh: State) -> State:
        """The state of *route*: *fresh*, unless another thread kept one first."""
        with self._lock:
            return self._states.setdefault(route.pattern, fresh)

    def states(self) -> list[State]:
        """The state of each route used so far, in the order they were made."""
        with self._lock:
            return list(self._states.values())

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (a parent's thread may have held this one)."""
        self._lock = threading.Lock()
