"""The redis backend: each host's guards kept in step with a fleet's, off the caller's thread.

A per-session daemon thread does every Redis round trip: every ``sync_interval_ms``, and at
once when a failure may open a breaker, it sends each host in use its batch (the failures,
successes, deposits, withdrawals and throttle counts since the last sync) and reads the
fleet's state back, one Lua script call per host, all in one pipeline (in a Redis Cluster, one
per master: ``slots``); ``roster`` says which hosts a sync sends. A second thread listens for
the openings the script publishes (``push``), so every worker follows one at once. A call only
ever reads local fields, so a slow or dead Redis can never delay it, and every Redis error ends
here: the guards go on as memory guards, and ``state.degraded`` / ``state.restored`` say so,
once each per outage. docs/fleet.md says what is kept where and what is promised.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import threading
import uuid
import weakref
from typing import Any, Final

from resilient_session._observe.hooks import BackendChange, StateChange
from resilient_session._observe.redact import redact_store_url
from resilient_session._observe.state_report import EVENTS_ONLY, StateReport
from resilient_session._state.interface import Guards, Held, HostsNow, scope_key
from resilient_session.clock import SYSTEM_CLOCK, Clock
from resilient_session.config.policy import HostPolicy, StatePolicy

from . import push, sync_thread
from .breaker import FleetBreaker
from .budget import FleetBucket
from .connect import open_link
from .inbox import Inbox
from .lua import (
    CORRECTED_BREAKER,
    CORRECTED_BUDGET,
    CORRECTED_THROTTLE,
    CORRECTED_WORKERS,
    SYNC,
)
from .slots import UNREACHED
from .sync_batch import Batch, SyncedHost, isolate, put_back, take_batch, take_in
from .sync_hosts import Roster
from .throttle import FleetThrottle

# A worker is counted in a host's budget split while it synced within this many intervals.
_ALIVE_INTERVALS: Final = 3
_MIN_ALIVE_MS: Final = 1_000
# Failed syncs in a row make an outage (state.degraded, and health's state_degraded) once
# they have gone on this many sync intervals, and this long at least: a busy machine can hold
# a healthy Redis past timeout_ms for a few syncs in a row, for a tenth of a second or so.
_OUTAGE_INTERVALS: Final = 3
_MIN_OUTAGE: Final = 0.25
# A fork waits at most this long for a sync in flight: one lasts a few timeout_ms, and
# one waiting on Redis past this holds only its socket.
_FORK_WAIT: Final = 5.0

# Hosts told of by a state.corrected event, at most: a prefix written over wholesale is one
# incident, not one warning per host held.
_MAX_CORRECTED_SHOWN: Final = 100
_CORRECTED_NAMES: Final = (
    (CORRECTED_BREAKER, "breaker"),
    (CORRECTED_BUDGET, "budget"),
    (CORRECTED_THROTTLE, "throttle"),
    (CORRECTED_WORKERS, "workers"),
)

_live: weakref.WeakSet[RedisBackend] = weakref.WeakSet()


class RedisBackend:
    """Guards shared with every worker that names the same Redis and ``key_prefix``.

    Args:
        policy: the ``state:`` section.
        clock: the clock the guards run on.
        rng: the guards' random source (the throttle's draws).

    Raises:
        ConfigError: ``state.url`` is not a URL redis-py can connect with, or a TLS file
            named cannot be read.
    """

    name = "redis"

    def __init__(
        self,
        policy: StatePolicy,
        clock: Clock,
        rng: random.Random,
        report: StateReport = EVENTS_ONLY,
    ) -> None:
        self._policy = policy
        self._report = report
        # The changes a sync noted, reported once its lock is released.
        self._noted: list[StateChange | BackendChange] = []
        self._clock = clock
        self._rng = rng
        # The reopening jitter is drawn on the sync thread, from its own source, so the
        # session's backoff jitter stays the sequence it would be in memory.
        self._jitter = random.Random()  # noqa: S311 - jitter, not secrets
        self._interval = policy.sync_interval_ms / 1000
        self._alive_ms = max(_MIN_ALIVE_MS, _ALIVE_INTERVALS * policy.sync_interval_ms)
        self._outage_after = max(_MIN_OUTAGE, _OUTAGE_INTERVALS * policy.sync_interval_ms / 1000)
        self._url_shown = redact_store_url(policy.url)
        # One server, a cluster or the sentinels' master: connect.py builds redis-py's client.
        self._link = open_link(policy, SYNC)
        self._channel = push.channel(policy.key_prefix)
        self._source: HostsNow = list
        # A host stays in use as long as a worker that stopped calling it stays counted in
        # its budget split: a worker calling a host now and then is not dropped in between.
        self._roster = Roster(
            policy.key_prefix,
            self._alive_ms / 1000,
            SYSTEM_CLOCK,
            tagged=policy.mode == "cluster",
        )
        # Held for each sync, and by a fork for its duration: a sync takes the registry's,
        # the guards' and redis-py's locks, and one held at a fork stays held in the child.
        self._syncing = threading.Lock()
        # The listener's socket, which each try looks at before it goes out.
        self._inbox = Inbox()
        self._begin()
        _live.add(self)

    def _begin(self) -> None:
        """Fresh synchronisation and fresh threads: at construction and in a forked child."""
        # Hosts whose corrected values were logged already.
        self._corrected: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._closed = False
        self._hurried = False
        self._degraded_at: float | None = None
        self._failing_since: float | None = None
        self._failed_syncs = 0
        self._worker = uuid.uuid4().hex
        self._subscription: Any = None
        self._inbox.reset()
        self._roster.pushed(False)
        self._thread = threading.Thread(
            target=sync_thread.run,
            args=(weakref.ref(self), self._wake, self._interval),
            name="resilient-session-state-sync",
            daemon=True,
        )
        self._listener = threading.Thread(
            target=push.run,
            args=(weakref.ref(self), self._stop, self._channel, SYSTEM_CLOCK, self._inbox),
            name=push.THREAD_NAME,
            daemon=True,
        )
        self._thread.start()
        self._listener.start()

    @property
    def degraded(self) -> bool:
        return self._degraded_at is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def hurried(self) -> bool:
        """A breaker opened here since the last sync began: the fleet must hear of it now."""
        return self._hurried

    def synced(self) -> list[str]:
        """The host keys kept in step as of the last sync, idle ones included."""
        return list(self._roster.hosts)

    def serves(self, wake: threading.Event) -> bool:
        """True while open and waking its thread with *wake* (a forked child has its own)."""
        return not self._closed and self._wake is wake

    def _touch(self, key: str) -> None:
        """Sync soon, host *key* included: a failure may open its breaker, or it was called
        after a quiet spell. Looked up on each call, as a forked child's thread waits on an
        event of its own; nothing is noted once closed, when no sync comes to take it."""
        if not self._closed:
            self._roster.touch(key)
            self._wake.set()

    def _hurry(self, key: str) -> None:
        """Sync now, host *key* included: its breaker opened here, and the sync that tells the
        fleet is the one that pushes the opening to every other worker."""
        if not self._closed:
            self._hurried = True
            self._roster.touch(key)
            self._wake.set()

    def build(self, key: str, policy: HostPolicy, route: str | None = None) -> Guards:
        clock, rng = self._clock, self._rng
        # A route's state is kept under keys of its own: the host key with the route after it.
        kept = scope_key(key, route)
        return (
            FleetBreaker(
                key,
                policy.breaker,
                clock,
                rng,
                functools.partial(self._touch, kept),
                functools.partial(self._hurry, kept),
                self._inbox.heed,
                route,
                aheed=self._inbox.aheed,
            ),
            FleetBucket(policy.budget, clock),
            FleetThrottle(policy.throttle, clock, rng) if policy.throttle.enabled else None,
        )

    def serve(self, hosts: HostsNow) -> None:
        """Sync, from now on, the hosts *hosts* returns at each sync."""
        self._source = hosts
        self._roster.changed()
        self._wake.set()

    def added(self, host: Held) -> None:
        """Sync now: a new host's state is read from the fleet at once, not a tick later."""
        self._roster.add(host)
        self._wake.set()

    def close(self) -> None:
        """Stop the sync and listener threads and drop the connections; the guards go on
        locally."""
        self._closed = True
        self._stop.set()
        self._wake.set()
        current = threading.current_thread()
        if self._thread is not current:
            self._thread.join(timeout=1.0 + 2 * self._policy.timeout_ms / 1000)
        self._link.close()
        # Dropping the connections also ends the listener's wait for a message.
        if self._listener is not current:
            self._listener.join(timeout=1.0 + push.POLL)

    def after_fork(self) -> None:
        """In a forked child: the parent's threads did not come along; start this worker's,
        with a worker id of its own, for the hosts the parent had. The parent's subscribed
        socket is closed here, the child's copy only: it stays the parent's."""
        with contextlib.suppress(Exception):
            self._subscription.connection.disconnect()
        self._begin()

    # -- the listener thread's side ------------------------------------------------------------

    def pubsub(self) -> Any:
        """A new ``PubSub`` of this backend's client, for the listener thread."""
        # redis-py leaves pubsub() unannotated.
        self._subscription = self._link.pubsub()
        return self._subscription

    def listening(self, live: bool) -> None:
        """The listener's subscription was heard (*live*): openings are pushed, and the idle
        hosts are read once for what was missed; or it was lost: they are read round robin."""
        self._roster.pushed(live)
        if live:
            self._wake.set()

    def hear(self, pushed: push.Pushed) -> bool:
        """An opening the fleet pushed: the host's breaker follows it at once (``FleetBreaker.
        hear`` says when it does not). Not while degraded: the guards count on their own until
        Redis answers the syncs again. Returns whether a breaker here followed it.

        The sync thread is not woken for it: the opening is all there is to know now, the
        next sync reads the rest, and every worker syncing at the instant of a push would take
        the CPU that the workers yet to hear it need.
        """
        host = self._roster.hosts.get(pushed.host)
        if host is None or self._closed or self._degraded_at is not None:
            return False
        limit = host.policy.breaker.recovery_timeout_max
        followed, transition = host.breaker.hear(
            pushed.generation, min(pushed.open_for_ms / 1000, limit)
        )
        if transition is not None:
            # Under no lock, as the sync reports what it noted.
            self._report.tell([transition])
        return followed

    # -- the sync thread's side ----------------------------------------------------------------

    def sync(self) -> None:
        """One round trip: the batches of the hosts in use out, the fleet's state in; idle
        hosts only to catch up on pushes missed. Never raises."""
        with self._syncing:
            self._hurried = False
            self._sync()
            noted, self._noted = self._noted, []
        # No hook runs under the sync's lock: one that calls the session cannot deadlock it.
        self._report.tell(noted)

    def _sync(self) -> None:
        roster = self._roster
        roster.refresh(self._source)
        hosts: list[SyncedHost] = []
        batches: list[Batch] = []
        # After a failed sync, one host at least: a sync is how the backend learns that Redis
        # is back, with no host in use as well.
        for host, resting in roster.due(at_least_one=self._failed_syncs > 0):
            batch = take_batch(host, self._worker, self._alive_ms, self._jitter, self._channel)
            if roster.keep(host, batch, resting):
                hosts.append(host)
                batches.append(batch)
        if not hosts:
            return
        try:
            replies = self._run_script(hosts, batches)
        except Exception as error:  # noqa: BLE001 - every Redis failure ends here, as local work
            self._degrade(error, hosts, batches)
            return
        refusals = [reply for reply in replies if isinstance(reply, Exception)]
        lost = [isinstance(reply, UNREACHED) for reply in replies]
        if len(refusals) == len(replies):
            # A Redis that answers but refuses every script (out of memory, a read-only
            # replica, a script it cannot run) shares nothing: an outage like a dead one.
            first = next((r for r, gone in zip(replies, lost, strict=True) if gone), refusals[0])
            self._degrade(first, hosts, batches)
            return
        if any(lost):
            # A cluster master out of reach: its hosts' syncs failed, the others' did not.
            # First, as an outage that begins sets every host to count on its own.
            gone = [index for index, flag in enumerate(lost) if flag]
            self._degrade(replies[gone[0]], [hosts[i] for i in gone], [batches[i] for i in gone])
        reached = []
        for host, batch, reply, unreached in zip(hosts, batches, replies, lost, strict=True):
            if unreached:
                continue
            reached.append(host)
            if isinstance(reply, Exception):
                # A key of the wrong type: that host runs on its own state until a good
                # reply comes, not on a fleet's run of failures it can no longer read.
                isolate(host)
            else:
                corrected = take_in(host, batch, reply, self._noted.append)
                if corrected and host.key not in self._corrected:
                    self._report_corrected(host, corrected)
        roster.read(reached)
        if not any(lost):
            self._restore()

    def _report_corrected(self, host: SyncedHost, corrected: int) -> None:
        """One ``state.corrected`` per host (or route) and process: values under the prefix
        that no worker's script writes, which someone else put there."""
        if len(self._corrected) >= _MAX_CORRECTED_SHOWN:
            return
        self._corrected.add(host.key)
        names = ",".join(name for bit, name in _CORRECTED_NAMES if corrected & bit)
        breaker = host.breaker
        route = () if breaker.route is None else (("route", breaker.route),)
        detail = (("host", breaker.host), *route, ("fields", names))
        self._noted.append(BackendChange("state.corrected", self.name, self._url_shown, detail))

    def _run_script(self, hosts: list[SyncedHost], batches: list[Batch]) -> list[Any]:
        """One call of the script per host: in one pipeline to one server, or one pipeline per
        cluster master (``link`` and ``slots``)."""
        return self._link.run(
            [(host.keys, batch.args) for host, batch in zip(hosts, batches, strict=True)]
        )

    def _degrade(self, error: Exception, hosts: list[SyncedHost], batches: list[Batch]) -> None:
        now = SYSTEM_CLOCK.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        self._failed_syncs += 1
        if self._degraded_at is None and now - self._failing_since < self._outage_after:
            # A blip: the batch goes out again with the next sync, so a slow Redis loses no
            # count. A sync that timed out after the server ran it is counted twice: at most
            # the blip's few batches per worker, in the cautious direction for the breaker.
            for host, batch in zip(hosts, batches, strict=True):
                put_back(host, batch)
            return
        # An outage: the counts are this process's own from here on. Idle hosts too, at its
        # start: the fleet's view they last read must not count while out of reach.
        starts = self._degraded_at is None
        for host in self._roster.hosts.values() if starts else hosts:
            isolate(host)
        if starts and not self._closed:
            self._degraded_at = self._failing_since
            self._noted.append(
                BackendChange(
                    "state.degraded", self.name, self._url_shown, (("error", _name(error)),)
                )
            )

    def _restore(self) -> None:
        self._failed_syncs = 0
        self._failing_since = None
        degraded_at = self._degraded_at
        if degraded_at is not None:
            self._degraded_at = None
            degraded_for = round(SYSTEM_CLOCK.monotonic() - degraded_at, 6)
            self._noted.append(
                BackendChange(
                    "state.restored", self.name, self._url_shown, (("degraded_for", degraded_for),)
                )
            )


def _name(error: Exception) -> str:
    return type(error).__name__


# The backends whose sync a fork in progress holds off.
_held: list[RedisBackend] = []


def _before_fork() -> None:
    # Each sync thread takes its own backend's lock only, and no caller forks from inside a
    # guard or the registry: waiting here for a sync in flight cannot deadlock.
    # Bounded all the same: a fork from inside a sync (a log handler's) must not hang.
    for backend in list(_live):
        if backend._syncing.acquire(timeout=_FORK_WAIT):
            _held.append(backend)


def _after_fork_in_parent() -> None:
    while _held:
        _held.pop()._syncing.release()


def _after_fork_in_child() -> None:
    _after_fork_in_parent()
    for backend in list(_live):
        if not backend.closed:
            backend.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
