"""What a finished try means to each guard: one table, built from the host's statuses.

Every stage that judges a try reads it here, so a status configured as overload is overload
for every guard, and one taken out is overload for none:

==========================  =========  ========  ========  ======
a try that ended in          tier       breaker   throttle  limit
==========================  =========  ========  ========  ======
1xx, 2xx, 3xx               success    success   accept    success
an ``overload_statuses``    overload   failure   reject    drop
  status (429, 503)                    if 5xx,
                                       else
                                       success
a ``transient_statuses``    transient  failure   reject    ignore
  status (408, 425, 500,               if 5xx    if 5xx,   if 5xx,
  502, 504)                            else      else      else
                                       success   accept    success
any other 5xx               never      failure   reject    ignore
any other 4xx               never      success   accept    success
a transport error or a      transient  failure   reject    drop
  timeout of the host's
a cut by the caller's       transient  neutral   --        ignore*
  deadline
a TLS, URL or proxy-        never      neutral   --        ignore
  credential error
a try refused locally       --         neutral   --        ignore
==========================  =========  ========  ========  ======

The breaker counts 5xx and transport failures (a 429 is a host alive enough to say when to
come back); the throttle accepts what the host answered with anything but a failure or an
overload; the limit shrinks on what says the host could not take the try, grows on answers,
and ignores failures that say nothing of capacity. "--" is no try for that guard. (*) A cut
that lasted the host's own timeout would have timed out anyway: the limit stage, which times
the try, counts it as a drop. Statuses below 400 end the call whatever the tiers list.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

import requests

from resilient_session.config.policy import RetryPolicy
from resilient_session.errors import DeadlineExceeded

from .breaker import TryResult
from .limit import Signal


class Tier(str, Enum):
    """How an outcome is treated by the decision to retry."""

    SUCCESS = "success"
    NEVER = "never"
    TRANSIENT = "transient"
    OVERLOAD = "overload"


@dataclass(frozen=True, slots=True)
class Meaning:
    """One row of the table: what a finished try means to decide and to each guard.

    Attributes:
        tier: the tier the decide stage retries by.
        breaker: success, failure or neutral, for the circuit breaker.
        accepted: for the adaptive throttle: True accepted, False a try without an accept,
            None no try at all.
        limit: for the concurrency limit: success, drop or ignore.
    """

    tier: Tier
    breaker: TryResult
    accepted: bool | None
    limit: Signal


_SUCCESS, _FAILURE, _NEUTRAL = TryResult.SUCCESS, TryResult.FAILURE, TryResult.NEUTRAL
_GROW, _DROP, _IGNORE = Signal.SUCCESS, Signal.DROP, Signal.IGNORE

ANSWERED_ROW: Final = Meaning(Tier.SUCCESS, _SUCCESS, True, _GROW)
_TRANSPORT_FAILURE: Final = Meaning(Tier.TRANSIENT, _FAILURE, False, _DROP)
_DEADLINE_CUT: Final = Meaning(Tier.TRANSIENT, _NEUTRAL, None, _IGNORE)
_OURS: Final = Meaning(Tier.NEVER, _NEUTRAL, None, _IGNORE)
REFUSED: Final = Meaning(Tier.NEVER, _NEUTRAL, None, _IGNORE)

# Retrying these only hides a configuration problem: a bad certificate, a malformed URL, a
# proxy that wants credentials. They never count against the breaker either.
_NEVER_ERRORS: tuple[type[Exception], ...] = (
    requests.exceptions.SSLError,
    requests.exceptions.InvalidURL,
    requests.exceptions.InvalidSchema,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidHeader,
)

_TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
)


def is_transient_error(error: BaseException | None) -> bool:
    """True for transport failures worth another try; False for configuration-shaped errors."""
    if error is None or isinstance(error, _NEVER_ERRORS):
        return False
    if isinstance(error, requests.exceptions.ProxyError):
        # A proxy that answers 407 wants credentials; asking again will not change that.
        return "407" not in str(error)
    return isinstance(error, _TRANSIENT_ERRORS)


def error_meaning(error: BaseException | None) -> Meaning:
    """The row of a try that ended in *error* (sent, not refused locally)."""
    if isinstance(error, DeadlineExceeded):
        return _DEADLINE_CUT
    return _TRANSPORT_FAILURE if is_transient_error(error) else _OURS


def _status_meaning(status: int, policy: RetryPolicy) -> Meaning:
    if status < 400:
        return ANSWERED_ROW
    failed = status >= 500
    if status in policy.overload_statuses:
        return Meaning(Tier.OVERLOAD, _FAILURE if failed else _SUCCESS, False, _DROP)
    tier = Tier.TRANSIENT if status in policy.transient_statuses else Tier.NEVER
    if failed:
        return Meaning(tier, _FAILURE, False, _IGNORE)
    return Meaning(tier, _SUCCESS, True, _GROW)


class TryTable:
    """The table for one host's retry policy; rows are built on first use and kept.

    Shared by every host whose policy lists the same statuses (:func:`table_for`).
    """

    __slots__ = ("_policy", "_rows")

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        # At most one row per status a server can send (three digits): bounded.
        self._rows: dict[int, Meaning] = {}

    def of_status(self, status: int) -> Meaning:
        """The row of a try answered with *status*."""
        row = self._rows.get(status)
        if row is None:
            # Two threads may build the same row; both build equal values.
            row = self._rows[status] = _status_meaning(status, self._policy)
        return row

    def of(self, status: int | None, error: BaseException | None, refused: bool) -> Meaning:
        """The row of a finished try: its response's *status*, else its *error*; *refused*
        when a local guard refused it before the network."""
        if refused:
            return REFUSED
        if status is not None:
            return self.of_status(status)
        return error_meaning(error)


_TABLES: dict[tuple[frozenset[int], frozenset[int]], TryTable] = {}
# Distinct status lists are a handful per configuration; past this the cache starts afresh.
_TABLES_KEPT: Final = 256


def table_for(policy: RetryPolicy) -> TryTable:
    """The table for *policy*'s statuses, one per distinct pair of status lists."""
    key = (policy.overload_statuses, policy.transient_statuses)
    table = _TABLES.get(key)
    if table is None:
        if len(_TABLES) >= _TABLES_KEPT:
            _TABLES.clear()
        table = _TABLES[key] = TryTable(policy)
    return table
