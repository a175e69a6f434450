"""Why a try ended as it did: the fixed set of ``reason`` values in ``http.try`` events.

A leaf of its own, so the wire (``wire.py``) can name the reason a refusal is for without
importing the values that carry the wire.
"""

from __future__ import annotations

from enum import Enum


class Reason(str, Enum):
    """Why; the fixed set of ``reason`` values in ``http.try`` events."""

    OK = "ok"
    TRANSIENT = "transient"
    OVERLOAD = "overload"
    NOT_RETRYABLE = "not_retryable"
    NOT_IDEMPOTENT = "not_idempotent"
    BODY_NOT_REPLAYABLE = "body_not_replayable"
    MAX_ATTEMPTS = "max_attempts"
    RETRY_AFTER_TOO_LONG = "retry_after_too_long"
    BREAKER_OPEN = "breaker_open"
    DEADLINE = "deadline"
    BUDGET_EXHAUSTED = "budget_exhausted"
    DEADLINE_SPENT = "deadline_spent"
    THROTTLED = "throttled"
    CONCURRENCY_LIMIT = "concurrency_limit"
    CALLER_RETRIES = "caller_retries"
    HEDGE_LOST = "hedge_lost"
