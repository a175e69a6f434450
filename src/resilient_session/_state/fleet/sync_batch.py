"""One host's exchange with the fleet: its batch as the sync script's arguments, the script's
reply taken in, and what a failed sync does to the batch. No I/O here: the backend sends."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from resilient_session._observe.hooks import StateChange
from resilient_session._observe.state_report import EVENTS_ONLY
from resilient_session._state.breaker import BreakerState
from resilient_session._state.limit import ConcurrencyLimit
from resilient_session.config.policy import HostPolicy

from .breaker import BreakerReport, FleetBreaker, StateCode
from .budget import FleetBucket
from .keys import HostKeys, host_keys
from .lua import (
    CORRECTED_BREAKER,
    CORRECTED_BUDGET,
    CORRECTED_THROTTLE,
    CORRECTED_WORKERS,
    LAST_GENERATION,
)
from .throttle import FleetThrottle

# Keys outlive the longest state they hold (an opening, a throttle window) twice over, and
# at least this long, so a host that goes quiet for a while keeps its fleet state.
_MIN_TTL_MS: Final = 300_000
# A reopening lasts up to this much longer at random, as CircuitBreaker's does.
_REOPEN_JITTER: Final = 0.2
_CLOSED = BreakerState.CLOSED
_EVERYTHING: Final = CORRECTED_BREAKER | CORRECTED_BUDGET | CORRECTED_THROTTLE | CORRECTED_WORKERS


@dataclass(frozen=True, slots=True)
class SyncedHost:
    """One host's guards and the Redis keys they are kept in step with."""

    key: str
    breaker: FleetBreaker
    bucket: FleetBucket
    throttle: FleetThrottle | None
    # The host's concurrency limit, when enabled: its tries in flight keep the host in use.
    limit: ConcurrencyLimit | None
    policy: HostPolicy
    keys: HostKeys
    ttl_ms: int

    @classmethod
    def of(
        cls,
        key: str,
        prefix: str,
        policy: HostPolicy,
        breaker: FleetBreaker,
        bucket: FleetBucket,
        throttle: FleetThrottle | None,
        limit: ConcurrencyLimit | None = None,
        *,
        tagged: bool = False,
    ) -> SyncedHost:
        """The keys are *prefix* + host *key* + a suffix (docs/fleet.md lists them), the host
        key as a hash tag when *tagged* (a Redis Cluster: ``keys.host_keys``)."""
        longest = max(policy.breaker.recovery_timeout_max, policy.throttle.window)
        return cls(
            key,
            breaker,
            bucket,
            throttle,
            limit,
            policy,
            host_keys(prefix, key, tagged=tagged),
            max(_MIN_TTL_MS, round(2000 * longest)),
        )


@dataclass(frozen=True, slots=True)
class Batch:
    """What one sync takes from a host's guards, and the script's arguments for it."""

    breaker: BreakerReport
    deposits: int
    withdrawals: int
    tries: int
    accepts: int
    own_tries: int
    own_accepts: int
    args: tuple[str | int | float, ...]

    @property
    def empty(self) -> bool:
        """Nothing to tell the fleet: no try counted, no state changed here since the last
        batch. Every count the batch sends is looked at."""
        report = self.breaker
        return not (
            report.failure_run
            or report.success_seen
            or report.change
            or self.deposits
            or self.withdrawals
            or self.tries
            or self.accepts
        )


def take_batch(
    host: SyncedHost, worker: str, alive_ms: int, jitter: random.Random, channel: str = ""
) -> Batch:
    """Everything the host's guards counted since the last sync, as ARGV of ``lua.SYNC``; an
    opening the script makes is published on *channel* (none when empty)."""
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
        worker,
        host.ttl_ms,
        alive_ms,
        int(report.state),
        report.open_for_ms,
        report.generation,
        report.failure_run,
        report.success_age_ms,
        int(report.change),
        breaker.failure_threshold,
        round(breaker.recovery_timeout * 1000),
        round(breaker.recovery_timeout_max * 1000),
        repr(1.0 + jitter.uniform(0.0, _REOPEN_JITTER)),
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
        report.run_age_ms,
        channel,
        host.key,
    )
    return Batch(report, deposits, withdrawals, tries, accepts, own_tries, own_accepts, args)


def put_back(host: SyncedHost, batch: Batch) -> None:
    """A sync failed once: the batch goes out again with the next one."""
    host.breaker.unsend(batch.breaker)
    host.bucket.unsend(batch.deposits, batch.withdrawals)
    if host.throttle is not None:
        host.throttle.unsend(batch.tries, batch.accepts)


def isolate(host: SyncedHost) -> None:
    """Redis is out of reach: the host's guards count on their own from here on."""
    host.breaker.isolate()
    if host.throttle is not None:
        host.throttle.isolate()


def take_in(
    host: SyncedHost,
    batch: Batch,
    reply: Any,
    told: Callable[[StateChange], None] = EVENTS_ONLY.transition,
) -> int:
    """Take in the fleet's state for *host* from the script's *reply*.

    Every value is checked as if a stranger wrote it: one out of range is clamped to what this
    host's policy allows; a reply that is malformed as a whole is ignored, and the host keeps
    its local state until a good one comes. Returns what was corrected, here or by the script
    (a sum of ``lua.CORRECTED_*``; every bit set when the reply was ignored), to be logged.
    A breaker change adopted from the fleet goes to *told* (the backend reports it once its
    lock is released).
    """
    try:
        state, open_ms, generation, tokens, tries, accepts, workers, failures = reply[:8]
        corrected = int(reply[8]) if len(reply) > 8 else 0
        code = StateCode(int(state))
        open_for = int(open_ms) / 1000
        fleet_tokens = float(tokens)
        counts = int(tries), int(accepts), int(workers), int(generation), int(failures)
    except (TypeError, ValueError, IndexError):
        return _EVERYTHING
    policy = host.policy
    if code is StateCode.HALF_OPEN or not 0 <= counts[3] <= LAST_GENERATION:
        return _EVERYTHING
    if not 0.0 <= open_for <= policy.breaker.recovery_timeout_max:
        open_for = min(max(0.0, open_for), policy.breaker.recovery_timeout_max)
        corrected |= CORRECTED_BREAKER
    if not 0 <= counts[4] <= policy.breaker.failure_threshold:
        counts = (*counts[:4], min(max(0, counts[4]), policy.breaker.failure_threshold))
        corrected |= CORRECTED_BREAKER
    tokens_valid = 0.0 <= fleet_tokens <= policy.budget.max_tokens  # NaN fails it too
    if not tokens_valid:
        corrected |= CORRECTED_BUDGET
    if counts[2] < 1:
        counts = (counts[0], counts[1], 1, *counts[3:])
        corrected |= CORRECTED_WORKERS
    if counts[0] < 0 or not 0 <= counts[1] <= counts[0]:
        counts = (max(0, counts[0]), min(max(0, counts[1]), max(0, counts[0])), *counts[2:])
        corrected |= CORRECTED_THROTTLE
    transition = host.breaker.adopt(code, open_for, counts[3], counts[4])
    if tokens_valid:
        host.bucket.adopt(fleet_tokens, counts[2])
    throttle = host.throttle
    if throttle is not None:
        throttle.adopt(counts[0], counts[1], batch.own_tries, batch.own_accepts)
    if transition is not None:
        if transition.to_state is _CLOSED and throttle is not None:
            # As the breaker stage does when a probe closes it: the host was just proven
            # healthy by the fleet.
            throttle.reset()
        told(transition)
    return corrected
