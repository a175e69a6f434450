"""Which hosts a sync sends: every host in use at each sync, the idle ones only when needed.

A service calling hosts its users choose (webhooks) holds thousands it called once. Sent
at every sync, each costs a script call whether or not it was called since, and a sync then
outlasts ``timeout_ms`` (docs/fleet.md has the figures). So a sync's cost follows the hosts
in use, not the hosts held:

- a host is **in use** while a try on it was counted within the last ``warm`` seconds, or a
  try on it is in flight (its concurrency limit says so): it is sent at every sync, empty
  batch or not, so the fleet's state reaches it within one interval and its keys' TTLs are
  kept;
- past that, with nothing in its batch, it goes **idle**: its batch is not sent, and its
  breaker dozes, so the next try on it wakes the sync thread (``FleetBreaker.doze``) and the
  host is in use again from that sync on;
- an idle host hears of an opening by push (``push``), so while the listener is subscribed
  it costs no sync anything. Each is read once when the listener subscribes again (what it
  missed meanwhile), at most ``_IDLE_RATE`` a second; and while no subscription is heard,
  idle hosts are read round robin, each about every ``_IDLE_PERIOD`` seconds, at most
  ``_IDLE_RATE`` a second in all.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from resilient_session._state.interface import Held, HostsNow
from resilient_session.clock import Clock

from .breaker import FleetBreaker
from .budget import FleetBucket
from .sync_batch import Batch, SyncedHost
from .throttle import FleetThrottle

# Without pushes, each idle host is read about this often (seconds), within _IDLE_RATE.
_IDLE_PERIOD: Final = 10.0
_IDLE_RATE: Final = 100.0
# Idle reads one sync may carry: after a long gap the reads owed are not all made at once.
_IDLE_BURST: Final = 16
# A host added is synced at once, on its own; the registry is read whole, to forget the
# hosts it evicted meanwhile, this long after the first host added since it last was. Read
# whole on each new host, 10,000 hosts held cost 15 ms of a sync per new host.
_REREAD_AFTER: Final = 1.0


class Roster:
    """The hosts the redis backend keeps in step, and which of them each sync sends.

    Used by the sync thread only, but for :meth:`touch`, which any thread may call.

    Args:
        prefix: ``state.key_prefix``.
        warm: seconds a host stays in use after its last counted try.
        clock: the clock in use and idleness are measured on.
        tagged: each host's keys carry it as a hash tag (``mode: cluster``).
    """

    def __init__(self, prefix: str, warm: float, clock: Clock, *, tagged: bool = False) -> None:
        self._prefix = prefix
        self._tagged = tagged
        self._warm = warm
        self._clock = clock
        self.hosts: dict[str, SyncedHost] = {}
        # The hosts in use, with when each last was: the others are idle.
        self._used: dict[str, float] = {}
        # The idle hosts are read in this order, from the cursor on.
        self._order: list[str] = []
        self._cursor = 0
        self._credit = 0.0
        self._credited_at: float | None = None
        # Whether openings are pushed (the listener's subscription was heard), and whether
        # it was heard again since the last sync: each idle host is then read once, as one
        # of _owed reads, for what was missed meanwhile.
        self._pushed = False
        self._caught_up = True
        self._owed = 0
        # Keys whose guards asked for a sync. A deque: appended from any thread without a
        # lock, so a fork can never leave one held.
        self._touched: deque[str] = deque()
        self._added: deque[Held] = deque()
        self._stale = True
        # When the first host was added since the registry was last read whole.
        self._added_at: float | None = None

    def touch(self, key: str) -> None:
        """Host *key* is in use from the next sync on (a failure, a state change, the first
        try after a quiet spell). Any thread."""
        self._touched.append(key)

    def pushed(self, live: bool) -> None:
        """Openings are pushed from now on (*live*), after a spell that may have missed some;
        or no longer. Any thread."""
        if live:
            self._caught_up = False
        self._pushed = live

    def changed(self) -> None:
        """The hosts come from another registry now: read it whole at the next sync."""
        self._stale = True

    def add(self, held: Held) -> None:
        """The registry just added *held* (and may have evicted a host): it is synced by the
        next sync. Any thread."""
        self._added.append(held)

    def refresh(self, source: HostsNow) -> None:
        """Take in the hosts added, each in use at once so that this sync reads its state from
        the fleet; read the registry whole when told to, and a while after hosts were added,
        as the registry evicts only when it adds. Never a registry unchanged."""
        added = self._added
        now = self._clock.monotonic()
        if self._stale or (self._added_at is not None and now - self._added_at >= _REREAD_AFTER):
            # Cleared first: a host added while *source* runs is in it or comes again.
            self._stale = False
            self._added_at = None
            added.clear()
            self._take(source(), {}, now)
        elif added:
            if self._added_at is None:
                self._added_at = now
            arrived = []
            while added:
                arrived.append(added.popleft())
            # A new dict, not this one changed: synced() may be reading it on another thread.
            self._take(arrived, dict(self.hosts), now)

    def _take(self, held: list[Held], hosts: dict[str, SyncedHost], now: float) -> None:
        known = self.hosts
        for key, policy, (breaker, bucket, throttle), limit in held:
            host = known.get(key)
            if host is None or host.breaker is not breaker:
                if not isinstance(breaker, FleetBreaker) or not isinstance(bucket, FleetBucket):
                    continue
                fleet_throttle = throttle if isinstance(throttle, FleetThrottle) else None
                host = SyncedHost.of(
                    key,
                    self._prefix,
                    policy,
                    breaker,
                    bucket,
                    fleet_throttle,
                    limit,
                    tagged=self._tagged,
                )
                self._used[key] = now
            hosts[key] = host
        self.hosts = hosts
        self._order = list(hosts)

    def due(self, at_least_one: bool = False) -> list[tuple[SyncedHost, bool]]:
        """The hosts this sync takes a batch from, each with whether it is going idle: a
        host in use past ``warm`` with no try in flight dozes here, and :meth:`keep` tells
        by its batch whether it went idle. Then the idle hosts whose turn it is to be read,
        and, with *at_least_one* (a degraded backend probing Redis), one in any case."""
        now = self._clock.monotonic()
        hosts, used = self.hosts, self._used
        touched = self._touched
        while touched:
            key = touched.popleft()
            if key in hosts:
                used[key] = now
        due: list[tuple[SyncedHost, bool]] = []
        for key, last in list(used.items()):
            host = hosts.get(key)
            if host is None:
                del used[key]
                continue
            resting = now - last >= self._warm and not _in_flight(host)
            if resting:
                # Before its batch is taken: a try after this wakes the sync thread, one
                # before it is in the batch.
                host.breaker.doze()
            due.append((host, resting))
        count = self._idle_reads(now, len(hosts) - len(used))
        if at_least_one and not due and not count:
            count = 1
        due += [(host, False) for host in self._next_idle(count)]
        return due

    def keep(self, host: SyncedHost, batch: Batch, resting: bool) -> bool:
        """Whether *host*'s *batch* is sent. A resting host's empty one is not: the host is
        idle from now. Every other batch is; one with anything in it keeps its host in use."""
        if batch.empty:
            if resting:
                del self._used[host.key]
                return False
            return True
        self._used[host.key] = self._clock.monotonic()
        if resting:
            host.breaker.doze(False)
        return True

    def read(self, hosts: list[SyncedHost]) -> None:
        """The fleet's state was taken in for *hosts*: the idle ones doze again, as the
        fleet's closing undoes a dozing breaker's withdrawn admission."""
        used = self._used
        for host in hosts:
            if host.key not in used:
                host.breaker.doze()

    def _idle_reads(self, now: float, idle: int) -> int:
        last, self._credited_at = self._credited_at, now
        if not self._caught_up:
            self._caught_up = True
            self._owed = idle
        pushed = self._pushed
        if last is None or idle <= 0 or (pushed and self._owed <= 0):
            self._credit = 0.0
            return 0
        rate = _IDLE_RATE if pushed else min(idle / _IDLE_PERIOD, _IDLE_RATE)
        self._credit = min(self._credit + rate * max(0.0, now - last), float(_IDLE_BURST))
        count = int(self._credit)
        self._credit -= count
        if pushed:
            count = min(count, self._owed)
            self._owed -= count
        return count

    def _next_idle(self, count: int) -> list[SyncedHost]:
        order, hosts, used = self._order, self.hosts, self._used
        picked: list[SyncedHost] = []
        size = len(order)
        for _ in range(size if count else 0):
            key = order[self._cursor % size]
            self._cursor = (self._cursor + 1) % size
            host = hosts.get(key)
            if host is not None and key not in used:
                picked.append(host)
                if len(picked) == count:
                    break
        return picked


def _in_flight(host: SyncedHost) -> bool:
    limit = host.limit
    return limit is not None and limit.snapshot().in_flight > 0
