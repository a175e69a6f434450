"""The one table of what a finished try means to decide and to each guard, row by row."""

from __future__ import annotations

import pytest

from resilient_session._state.breaker import TryResult
from resilient_session._state.limit import Signal
from resilient_session._state.try_table import ErrorKind, Tier, TryTable, table_for
from resilient_session.config.policy import RetryPolicy

S, F, N = TryResult.SUCCESS, TryResult.FAILURE, TryResult.NEUTRAL
GROW, DROP, IGNORE = Signal.SUCCESS, Signal.DROP, Signal.IGNORE
DEFAULT = RetryPolicy()
WITH_420 = RetryPolicy(overload_statuses=frozenset({420, 429, 503}))
WITHOUT_429 = RetryPolicy(overload_statuses=frozenset({503}))


@pytest.mark.parametrize(
    ("policy", "status", "row"),
    [
        (DEFAULT, 200, (Tier.SUCCESS, S, True, GROW)),
        (DEFAULT, 204, (Tier.SUCCESS, S, True, GROW)),
        (DEFAULT, 302, (Tier.SUCCESS, S, True, GROW)),
        (DEFAULT, 429, (Tier.OVERLOAD, S, False, DROP)),
        (DEFAULT, 503, (Tier.OVERLOAD, F, False, DROP)),
        (DEFAULT, 408, (Tier.TRANSIENT, S, True, GROW)),
        (DEFAULT, 425, (Tier.TRANSIENT, S, True, GROW)),
        (DEFAULT, 500, (Tier.TRANSIENT, F, False, IGNORE)),
        (DEFAULT, 502, (Tier.TRANSIENT, F, False, IGNORE)),
        (DEFAULT, 504, (Tier.TRANSIENT, F, False, IGNORE)),
        (DEFAULT, 501, (Tier.NEVER, F, False, IGNORE)),
        (DEFAULT, 404, (Tier.NEVER, S, True, GROW)),
        (DEFAULT, 420, (Tier.NEVER, S, True, GROW)),
        (WITH_420, 420, (Tier.OVERLOAD, S, False, DROP)),
        (WITHOUT_429, 429, (Tier.NEVER, S, True, GROW)),
        (WITHOUT_429, 503, (Tier.OVERLOAD, F, False, DROP)),
        (RetryPolicy(overload_statuses=frozenset({302, 503})), 302, (Tier.SUCCESS, S, True, GROW)),
    ],
    ids=lambda value: str(value) if isinstance(value, int) else None,
)
def test_each_status_row(policy, status, row):
    """A status's row follows the host's tiers: overload for every guard when listed, for
    none when not; 1xx-3xx are a success whatever the tiers list."""
    meaning = TryTable(policy).of(status, None, refused=False)
    assert (meaning.tier, meaning.breaker, meaning.accepted, meaning.limit) == row


@pytest.mark.parametrize(
    ("kind", "row"),
    [
        (ErrorKind.CONNECT, (Tier.TRANSIENT, F, False, DROP)),
        (ErrorKind.TRANSIENT, (Tier.TRANSIENT, F, False, DROP)),
        (ErrorKind.DEADLINE_CUT, (Tier.TRANSIENT, N, None, IGNORE)),
        (ErrorKind.OURS, (Tier.NEVER, N, None, IGNORE)),
        (None, (Tier.NEVER, N, None, IGNORE)),
    ],
)
def test_each_error_row(kind, row):
    """A transport failure of the host's, before or after sending, is a failure everywhere; a
    cut by the caller's deadline or an error of ours is no evidence about the host."""
    meaning = table_for(DEFAULT).of(None, kind, refused=False)
    assert (meaning.tier, meaning.breaker, meaning.accepted, meaning.limit) == row


def test_a_try_refused_locally_is_no_try_for_any_guard():
    """Refused before the network: neutral for the breaker, no try for the throttle, the
    limit ignores it, even if it carries a status or an error."""
    meaning = table_for(DEFAULT).of(503, ErrorKind.CONNECT, refused=True)
    assert (meaning.breaker, meaning.accepted, meaning.limit) == (N, None, IGNORE)


def test_hosts_with_the_same_statuses_share_one_table():
    """Equal status lists give the same table; another list gives another."""
    other = RetryPolicy(max_attempts=2)
    assert table_for(other) is table_for(DEFAULT)
    assert table_for(WITH_420) is not table_for(DEFAULT)
