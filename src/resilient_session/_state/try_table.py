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

from resilient_session.config.policy import RetryPolicy

from .breaker import TryResult
from .limit import Signal


class ErrorKind(str, Enum):
    """What a try's error says, whatever the transport that raised it: the key of the table's
    error half, told by the call's wire (``_pipeline/wire.py``)."""

    # The request never left (refused, DNS, a connect timeout): safe to retry for any method,
    # and no sign the upstream saw anything.
    CONNECT = "connect"
    # A transport failure after the request may have been written (a reset, a read timeout,
    # a body cut mid-way): worth another try where replaying is safe.
    TRANSIENT = "transient"
    # The caller's deadline cut the try: transient, and nothing against the host.
    DEADLINE_CUT = "deadline_cut"
    # Ours to fix, never the host's: TLS, a malformed URL, a proxy wanting credentials.
    OURS = "ours"


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

# The error half of the table, by what the error says (the wire says it: ``error_kind``).
_ERROR_ROWS: Final[dict[ErrorKind | None, Meaning]] = {
    ErrorKind.CONNECT: _TRANSPORT_FAILURE,
    ErrorKind.TRANSIENT: _TRANSPORT_FAILURE,
    ErrorKind.DEADLINE_CUT: _DEADLINE_CUT,
    ErrorKind.OURS: _OURS,
    None: _OURS,  # neither a status nor an error: nothing says the host failed
}


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

    def of(self, status: int | None, kind: ErrorKind | None, refused: bool) -> Meaning:
        """The row of a finished try: its response's *status*, else the *kind* of its error;
        *refused* when a local guard refused it before the network."""
        if refused:
            return REFUSED
        if status is not None:
            return self.of_status(status)
        return _ERROR_ROWS[kind]


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
