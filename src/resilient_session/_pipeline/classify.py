"""The row of the host's table (``state.meaning``) that a finished try falls in."""

from __future__ import annotations

from resilient_session._state.meaning import Meaning, TryTable

from .attempt import Outcome


def meaning_of(outcome: Outcome, table: TryTable) -> Meaning:
    """What *outcome* means to decide and to each guard, by the host's *table*."""
    response = outcome.response
    return table.of(
        response.status_code if response is not None else None,
        outcome.error,
        outcome.refused is not None,
    )
