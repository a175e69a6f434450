"""The redis backend: each host's guards kept in step with a fleet's, off the caller's thread.

A per-session daemon thread does every Redis round trip: every ``sync_interval_ms``, and at
once when a failure may open a breaker, it sends each host's batch (the failures, successes,
deposits, withdrawals and throttle counts since the last sync) and reads the fleet's state
back, all hosts in one pipeline of one Lua script call each. A call only ever reads local
fields, so a slow or dead Redis can never delay it, and every Redis error ends here: the
guards go on as memory guards, and ``state.degraded`` / ``state.restored`` say so, once each
per outage. docs/fleet.md says what is kept where and what is promised.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import threading
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.retry import Retry

from resilient_session.clock import SYSTEM_CLOCK, Clock
from resilient_session.errors import ConfigError
from resilient_session.events import emit_state_change, emit_transition
from resilient_session.policy import HostPolicy, StatePolicy
from resilient_session.redact import redact_text

from .backend import Guards
from .breaker import BreakerState
from .fleet import BreakerReport, FleetBreaker, FleetBucket, FleetThrottle, StateCode
from .lua import SYNC

# Keys outlive the longest state they hold (an opening, a throttle window) twice over, and
# at least this long, so a host that goes quiet for a while keeps its fleet state.
_MIN_TTL_MS: Final = 300_000
# A worker is counted in a host's budget split while it synced within this many intervals.
_ALIVE_INTERVALS: Final = 3
_MIN_ALIVE_MS: Final = 1_000
# Syncs that a failure triggers come at most this often: a host failing at random keeps
# failing, and the thread must not spin on the interpreter lock the callers need.
_URGENT_GAP: Final = 0.005
# Failed syncs in a row that make an outage: state.degraded, and health's state_degraded.
_OUTAGE_SYNCS: Final = 2
# A reopening lasts up to this much longer at random, as CircuitBreaker's does.
_REOPEN_JITTER: Final = 0.2
_CLOSED = BreakerState.CLOSED

_live: weakref.WeakSet[RedisBackend] = weakref.WeakSet()


@dataclass(frozen=True, slots=True)
class _Host:
    """One host's guards and the Redis keys they are kept in step with."""

    breaker: FleetBreaker
    bucket: FleetBucket
    throttle: FleetThrottle | None
    policy: HostPolicy
    keys: tuple[str, str, str, str]
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class _Batch:
    breaker: BreakerReport
    deposits: int
    withdrawals: int
    tries: int
    accepts: int
    own_tries: int
    own_accepts: int
    args: tuple[str | int | float, ...]


class RedisBackend:
    """Guards shared with every worker that names the same Redis and ``key_prefix``.

    Args:
        policy: the ``state:`` section.
        clock: the clock the guards run on.
        rng: the guards' random source (the throttle's draws).

    Raises:
        ConfigError: ``state.url`` is not a URL redis-py can connect with.
    """

    name = "redis"

    def __init__(self, policy: StatePolicy, clock: Clock, rng: random.Random) -> None:
        self._policy = policy
        self._clock = clock
        self._rng = rng
        # The reopening jitter is drawn on the sync thread, from its own source, so the
        # session's backoff jitter stays the sequence it would be in memory.
        self._jitter = random.Random()  # noqa: S311 - jitter, not secrets
        self._interval = policy.sync_interval_ms / 1000
        self._alive_ms = max(_MIN_ALIVE_MS, _ALIVE_INTERVALS * policy.sync_interval_ms)
        self._url_shown = redact_text(policy.url)
        timeout = policy.timeout_ms / 1000
        try:
            # One attempt within timeout_ms: redis-py's default retries with backoff alone
            # would outlast it.
            self._client: redis.Redis = redis.Redis.from_url(
                policy.url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
                retry_on_timeout=False,
                health_check_interval=0,
            )
        except ValueError as exc:
            raise ConfigError(f"state.url: {redact_text(str(exc))}") from None
        self._script = self._client.register_script(SYNC)
        self._begin()
        _live.add(self)

    def _begin(self) -> None:
        """Fresh synchronisation and a fresh thread: at construction and in a forked child."""
        self._lock = threading.Lock()
        self._hosts: dict[str, _Host] = {}
        self._wake = threading.Event()
        self._closed = False
        self._degraded_at: float | None = None
        self._failing_since: float | None = None
        self._failed_syncs = 0
        self._worker = uuid.uuid4().hex
        self._thread = threading.Thread(
            target=_run,
            args=(weakref.ref(self), self._wake, self._interval),
            name="resilient-session-state-sync",
            daemon=True,
        )
        self._thread.start()

    @property
    def degraded(self) -> bool:
        return self._degraded_at is not None

    def wake(self) -> None:
        """Sync soon: a failure may open a breaker. Looked up on each call, as a forked
        child's thread waits on an event of its own."""
        self._wake.set()

    def build(self, key: str, policy: HostPolicy) -> Guards:
        clock, rng = self._clock, self._rng
        return (
            FleetBreaker(key, policy.breaker, clock, rng, self.wake),
            FleetBucket(policy.budget, clock),
            FleetThrottle(policy.throttle, clock, rng) if policy.throttle.enabled else None,
        )

    def track(self, key: str, policy: HostPolicy, guards: Guards) -> None:
        breaker, bucket, throttle = guards
        if not isinstance(breaker, FleetBreaker) or not isinstance(bucket, FleetBucket):
            return
        prefix = self._policy.key_prefix + key
        longest = max(policy.breaker.recovery_timeout_max, policy.throttle.window)
        host = _Host(
            breaker,
            bucket,
            throttle if isinstance(throttle, FleetThrottle) else None,
            policy,
            (prefix + ":breaker", prefix + ":budget", prefix + ":throttle", prefix + ":workers"),
            max(_MIN_TTL_MS, round(2000 * longest)),
        )
        with self._lock:
            self._hosts[key] = host
        self._wake.set()

    def forget(self, key: str) -> None:
        with self._lock:
            self._hosts.pop(key, None)

    def close(self) -> None:
        """Stop the sync thread and drop the connections; the guards go on locally."""
        self._closed = True
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0 + 2 * self._policy.timeout_ms / 1000)
        self._client.close()

    def after_fork(self) -> None:
        """In a forked child: the parent's thread did not come along; start this worker's,
        with a worker id of its own, for the hosts the parent had."""
        hosts = dict(self._hosts)
        self._begin()
        with self._lock:
            self._hosts.update(hosts)

    # -- the sync thread's side ----------------------------------------------------------------

    def sync(self) -> None:
        """One round trip: every host's batch out, the fleet's state in. Never raises."""
        with self._lock:
            hosts = list(self._hosts.values())
        if not hosts:
            return
        batches = [self._batch(host) for host in hosts]
        try:
            replies = self._run_script(hosts, batches)
        except Exception as error:  # noqa: BLE001 - every Redis failure ends here, as local work
            self._degrade(error, hosts, batches)
            return
        for host, batch, reply in zip(hosts, batches, replies, strict=True):
            # A reply that is an error (a key of the wrong type) or malformed leaves that
            # host on its local state until a good one comes.
            if not isinstance(reply, Exception):
                _adopt(host, batch, reply)
        self._restore()

    def _run_script(self, hosts: list[_Host], batches: list[_Batch]) -> list[Any]:
        """One EVALSHA per host in one pipeline, one round trip. A server that lost the script
        (restarted, SCRIPT FLUSH) answers NOSCRIPT to all of them, and ran none: the script is
        loaded through its ``Script`` object and those hosts' batches are sent again."""
        replies = self._pipeline(hosts, batches)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            self._script.sha = self._client.script_load(self._script.script)
            again = self._pipeline([hosts[i] for i in missing], [batches[i] for i in missing])
            for index, reply in zip(missing, again, strict=True):
                replies[index] = reply
        return replies

    def _pipeline(self, hosts: list[_Host], batches: list[_Batch]) -> list[Any]:
        # Not the Script object's own pipeline support: it asks SCRIPT EXISTS first, a second
        # round trip on every sync.
        pipe = self._client.pipeline(transaction=False)
        try:
            for host, batch in zip(hosts, batches, strict=True):
                pipe.evalsha(self._script.sha, len(host.keys), *host.keys, *batch.args)
            replies: list[Any] = pipe.execute(raise_on_error=False)
            return replies
        finally:
            pipe.reset()

    def _batch(self, host: _Host) -> _Batch:
        report = host.breaker.exchange()
        deposits, withdrawals = host.bucket.exchange()
        throttle = host.throttle
        tries = accepts = own_tries = own_accepts = 0
        width_ms, buckets = 1000.0, 1
        if throttle is not None:
            tries, accepts, own_tries, own_accepts = throttle.exchange()
            width_ms, buckets = throttle.width * 1000, throttle.buckets
        breaker = host.policy.breaker
        budget = host.policy.budget
        args = (
            self._worker,
            host.ttl_ms,
            self._alive_ms,
            int(report.state),
            report.open_for_ms,
            report.generation,
            report.failure_run,
            int(report.success_seen),
            int(report.change),
            breaker.failure_threshold,
            round(breaker.recovery_timeout * 1000),
            round(breaker.recovery_timeout_max * 1000),
            repr(1.0 + self._jitter.uniform(0.0, _REOPEN_JITTER)),
            deposits,
            withdrawals,
            repr(budget.ratio),
            repr(budget.min_per_second),
            repr(budget.max_tokens),
            int(throttle is not None),
            tries,
            accepts,
            repr(width_ms),
            buckets,
        )
        return _Batch(report, deposits, withdrawals, tries, accepts, own_tries, own_accepts, args)

    def _degrade(self, error: Exception, hosts: list[_Host], batches: list[_Batch]) -> None:
        if self._failed_syncs + 1 < _OUTAGE_SYNCS:
            # A blip: the batch goes out again with the next sync, so a slow Redis loses no
            # count. A sync that timed out after the server ran it is counted twice: at most
            # one batch per worker per blip, and in the cautious direction for the breaker.
            for host, batch in zip(hosts, batches, strict=True):
                host.breaker.unsend(batch.breaker)
                host.bucket.unsend(batch.deposits, batch.withdrawals)
                if host.throttle is not None:
                    host.throttle.unsend(batch.tries, batch.accepts)
        else:
            # An outage: the counts are this process's own from here on.
            for host in hosts:
                host.breaker.isolate()
                if host.throttle is not None:
                    host.throttle.isolate()
        now = SYSTEM_CLOCK.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        self._failed_syncs += 1
        # One failed sync is a blip (a busy machine can hold a healthy Redis past 20 ms once):
        # the guards ran locally meanwhile and the batch goes out again, but only a second
        # failure in a row is an outage worth an event.
        if self._failed_syncs >= _OUTAGE_SYNCS and self._degraded_at is None and not self._closed:
            self._degraded_at = self._failing_since
            emit_state_change(
                "state.degraded", backend=self.name, url=self._url_shown, error=_name(error)
            )

    def _restore(self) -> None:
        self._failed_syncs = 0
        self._failing_since = None
        degraded_at = self._degraded_at
        if degraded_at is not None:
            self._degraded_at = None
            emit_state_change(
                "state.restored",
                backend=self.name,
                url=self._url_shown,
                degraded_for=round(SYSTEM_CLOCK.monotonic() - degraded_at, 6),
            )


def _name(error: Exception) -> str:
    return type(error).__name__


def _adopt(host: _Host, batch: _Batch, reply: Any) -> None:
    """Take in the fleet's state for *host*; a malformed reply is ignored."""
    try:
        state, open_ms, generation, tokens, tries, accepts, workers, failures = reply[:8]
        code = StateCode(int(state))
        open_for = int(open_ms) / 1000
        fleet_tokens = float(tokens)
        counts = int(tries), int(accepts), int(workers), int(generation), max(0, int(failures))
    except (TypeError, ValueError, IndexError):
        return
    if not math.isfinite(fleet_tokens) or code is StateCode.HALF_OPEN:
        return
    transition = host.breaker.adopt(code, open_for, counts[3], counts[4])
    host.bucket.adopt(fleet_tokens, counts[2])
    throttle = host.throttle
    if throttle is not None:
        throttle.adopt(counts[0], counts[1], batch.own_tries, batch.own_accepts)
    if transition is not None:
        if transition.to_state is _CLOSED and throttle is not None:
            throttle.reset()
        emit_transition(transition)


def _run(ref: weakref.ref[RedisBackend], wake: threading.Event, interval: float) -> None:
    """The sync thread: a sync every *interval*, and soon after a wake; it ends when the
    backend is closed or collected."""
    clock = SYSTEM_CLOCK
    next_tick = clock.monotonic()
    last_sync = -math.inf
    while True:
        backend = ref()
        if backend is None or backend._closed or backend._wake is not wake:
            return
        degraded = backend.degraded
        # Not held while waiting, so a session dropped without close() is still collected.
        del backend
        now = clock.monotonic()
        due = next_tick
        if degraded:
            # Redis is back within half an interval of returning, ticks or not: a worker
            # follows the fleet again within one sync interval.
            due = min(due, last_sync + interval / 2)
        if now < due:
            woke = wake.wait(due - now)
            now = clock.monotonic()
            if woke and now < due:
                if degraded:
                    # Redis is out of reach: retry on the ticks, not on every failure.
                    wake.clear()
                    continue
                if now - last_sync < _URGENT_GAP:
                    wake.clear()
                    wake.wait(_URGENT_GAP - (now - last_sync))
                    now = clock.monotonic()
        wake.clear()
        backend = ref()
        if backend is None or backend._closed or backend._wake is not wake:
            return
        # sync() catches every Redis error itself; the thread must outlive any other surprise.
        with contextlib.suppress(Exception):
            backend.sync()
        del backend
        last_sync = now
        if now >= next_tick:
            next_tick += interval * (math.floor((now - next_tick) / interval) + 1)


def _after_fork_in_child() -> None:
    for backend in list(_live):
        if not backend._closed:
            backend.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
