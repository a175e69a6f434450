"""The adaptive throttle a fleet shares: a window that also holds the other workers' tries."""

from __future__ import annotations

from resilient_session._state.throttle import AdaptiveThrottle


class FleetThrottle(AdaptiveThrottle):
    """An adaptive throttle whose window also holds the other workers' tries and accepts.

    The refusal chance is computed over this worker's window plus the rest of the fleet's, as
    of the last exchange (the base class's ``_others_*``, which only this class sets); without
    the fleet it is the memory throttle's.
    """

    __slots__ = ()

    @property
    def width(self) -> float:
        """Seconds per bucket of the window."""
        return self._width

    @property
    def buckets(self) -> int:
        """Buckets in the window."""
        return self._buckets

    def exchange(self) -> tuple[int, int, int, int]:
        """``(tries, accepts)`` counted since the last exchange, then this worker's window
        totals ``(tries, accepts)``, which the fleet's include."""
        with self._lock:
            self._fold()
            tries, accepts = self._sent_tries, self._sent_accepts
            self._sent_tries = self._sent_accepts = 0
            return tries, accepts, self._total_tries, self._total_accepts

    def unsend(self, tries: int, accepts: int) -> None:
        """Put back counts whose sync failed, to go out with the next one."""
        with self._lock:
            self._sent_tries += tries
            self._sent_accepts += accepts

    def adopt(self, fleet_tries: int, fleet_accepts: int, own_tries: int, own_accepts: int) -> None:
        """Count the fleet's window, less this worker's own share of it (*own_*), as others'."""
        with self._lock:
            self._others_tries = max(0, fleet_tries - own_tries)
            self._others_accepts = max(0, fleet_accepts - own_accepts)
            self._weigh()

    def isolate(self) -> None:
        """The fleet is out of reach: refuse from this worker's own window only."""
        with self._lock:
            self._others_tries = self._others_accepts = 0
            self._weigh()
