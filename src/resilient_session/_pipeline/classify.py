"""The row of the host's table (``state.meaning``) that a finished try falls in."""

from __future__ import annotations

from resilient_session._state.try_table import Meaning

from .attempt import Call, Outcome


def meaning_of(outcome: Outcome, call: Call) -> Meaning:
    """What *outcome* means to decide and to each guard, by the table of *call*'s host; the
    call's wire says what an error is, asked only when the table reads it (no status, not
    refused)."""
    response = outcome.response
    error = outcome.error
    refused = outcome.refused is not None
    if response is not None:
        return call.table.of(response.status_code, None, refused)
    kind = None if error is None or refused else call.wire.error_kind(error)
    return call.table.of(None, kind, refused)
