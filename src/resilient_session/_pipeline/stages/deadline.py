"""The deadline stage: fail fast when the deadline is spent, clamp timeouts, and tell the
upstream what is left of the deadline and which try this is; the call's wire
(``_pipeline/wire.py``) writes the headers, clamps the timeouts and bounds the try."""

from __future__ import annotations

from resilient_session._hops import format_attempt
from resilient_session._pipeline.attempt import Attempt, Outcome, Reason
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.intent import caller_retries
from resilient_session._pipeline.refusal import refuse


def enforce_deadline(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Innermost: each try's connect and read timeouts never outlast the call's deadline."""
    call = attempt.call
    deadline_at = call.deadline_at
    if deadline_at is None:
        attempt_header = call.policy.deadline.attempt_header
        if attempt_header is None:
            return call_next(attempt)
        request = attempt.request
        # hot path: single-header
        sent = call.wire.with_header(
            request, attempt_header, attempt_value(attempt), attempt.number == 1
        )
        if sent is request:  # written into the call's own request: no copy, no new attempt
            return call_next(attempt)
        return call_next(attempt.sending(sent, attempt.timeout))
    remaining = deadline_at - call.runtime.clock.monotonic()
    if remaining <= 0:
        return refuse(
            attempt,
            Reason.DEADLINE_SPENT,
            f"deadline for {call.method} {call.state.key} spent before try {attempt.number}",
        )
    wire = call.wire
    timeout, connect_cut, read_cut = wire.clamped(attempt.timeout, remaining)
    request = attempt.request
    names = call.policy.deadline
    if names.header is not None or names.attempt_header is not None:
        values: list[tuple[str, str]] = []
        if names.header is not None:
            values.append((names.header, str(int(remaining * 1000))))
        if names.attempt_header is not None:
            values.append((names.attempt_header, attempt_value(attempt)))
        request = wire.with_headers(request, values, attempt.number == 1)
    # Up to the body's last byte, unless the caller streams the body and so reads it later.
    with wire.bounded(remaining, not call.stream) as bound:
        outcome = call_next(attempt.sending(request, timeout))
    fired = bound.fired
    if fired or outcome.error is not None:
        exceeded = wire.deadline_error(
            fired,
            outcome.error,
            outcome.response,
            (connect_cut, read_cut),
            f"deadline for {call.method} {call.state.key} ran out during try {attempt.number}",
            attempt.request,
            call.runtime.redact,
        )
        if exceeded is not None:
            return Outcome(error=exceeded)
    return outcome


def attempt_value(attempt: Attempt) -> str:
    """``n; max=m``: this try's number and the most tries the call can make.

    A call that is not retried once it has reached the upstream (not idempotent, or a body
    that cannot be sent again) says this try is its last. While the request being served will
    be retried by its own caller, the value says so (n < m) even when this service makes one
    try, so the service below keeps to one try as well: one layer retries, the outermost.
    """
    call = attempt.call
    number = attempt.number
    most = call.policy.retry.max_attempts if call.idempotent and call.replayable else number
    # Below its most, a try says so whatever the caller intends.
    # hot path: last-try-intent
    if most <= number and caller_retries():
        most = number + 1
    # hot path: attempt-text
    texts = _TEXTS.get(most)
    if texts is not None:
        text = texts.get(number)
        if text is not None:
            return text
    return _attempt_text(number, most)


# The texts by the most tries, then by the try number: two lookups by an int cost less than
# one by a tuple of two (built and hashed each time) or an lru_cache's. At most 100 tries a
# call (retry.max_attempts), so these bounds are never reached by a config's own calls.
_TEXTS: dict[int, dict[int, str]] = {}
_MOSTS_KEPT = 128
_NUMBERS_KEPT = 128


def _attempt_text(number: int, most: int) -> str:
    """``format_attempt(number, most)``, kept in ``_TEXTS`` for the next try that asks."""
    texts = _TEXTS.get(most)
    if texts is None or len(texts) >= _NUMBERS_KEPT:
        if len(_TEXTS) >= _MOSTS_KEPT:
            _TEXTS.clear()
        texts = _TEXTS[most] = {}
    text = texts[number] = format_attempt(number, most)
    return text
