"""The deadline stage: fail fast when the deadline is spent, clamp timeouts, and tell the
upstream what is left of the deadline and which try this is."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import requests
from requests.structures import CaseInsensitiveDict

from resilient_session._compat import HeaderStore, header_store, headers_of
from resilient_session._observe.redact import redact_text
from resilient_session._pipeline.attempt import CALLS_OWN, Attempt, Outcome, Reason
from resilient_session._pipeline.attempt_header import format_attempt
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.intent import caller_retries
from resilient_session._transport.body import body_cut
from resilient_session._transport.timeouts import split_timeout
from resilient_session._transport.watchdog import DISARMED, WATCHDOG, WATCHED, Watch
from resilient_session.errors import DeadlineExceeded


def enforce_deadline(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Innermost: each try's connect and read timeouts never outlast the call's deadline."""
    call = attempt.call
    deadline_at = call.deadline_at
    if deadline_at is None:
        attempt_header = call.state.policy.deadline.attempt_header
        if attempt_header is None:
            return call_next(attempt)
        request = attempt.request
        if attempt.number == 1 and request.__dict__.pop(CALLS_OWN, False):
            # A request this call alone holds carries its first try's header itself: a copy
            # costs ~11,000 instructions, this write a few hundred.
            header_store(request.headers)[attempt_header.lower()] = (
                attempt_header,
                attempt_value(attempt),
            )
            return call_next(attempt)
        request = with_headers(request, ((attempt_header, attempt_value(attempt)),))
        return call_next(attempt.sending(request, attempt.timeout))
    remaining = deadline_at - call.runtime.clock.monotonic()
    if remaining <= 0:
        error = DeadlineExceeded(
            f"deadline for {call.method} {call.state.key} spent before try {attempt.number}",
            request=attempt.request,
        )
        return Outcome(error=error, refused=Reason.DEADLINE_SPENT, fallback=attempt.last_real)
    connect, read = split_timeout(attempt.timeout)
    connect_cut = connect is None or connect > remaining
    read_cut = read is None or read > remaining
    timeout = (remaining if connect_cut else connect, remaining if read_cut else read)
    request = attempt.request
    names = call.state.policy.deadline
    if names.header is not None or names.attempt_header is not None:
        values: list[tuple[str, str]] = []
        if names.header is not None:
            values.append((names.header, str(int(remaining * 1000))))
        if names.attempt_header is not None:
            values.append((names.attempt_header, attempt_value(attempt)))
        if attempt.number == 1 and request.__dict__.pop(CALLS_OWN, False):
            store = header_store(request.headers)
            for name, value in values:
                store[name.lower()] = (name, value)
        else:
            request = with_headers(request, values)
    # Per-read timeouts restart with each byte; the watchdog bounds the whole try: up to
    # the body's last byte, unless the caller streams the body and so reads it later.
    watch = Watch(remaining, body=False) if call.stream else Watch(remaining)
    token = WATCHED.set(watch)
    try:
        outcome = call_next(attempt.sending(request, timeout))
    finally:
        WATCHED.reset(token)
        # watchdog.settle(), inlined: a watch its connection disarmed, as every healthy try's
        # is, costs one comparison.
        fired = watch.state > DISARMED and WATCHDOG.disarm(watch)
    timed_out = outcome.error
    if fired and timed_out is None and outcome.response is not None:
        # Only a watch that lasts through the body fires on a try that returned: the body
        # ended as its socket was shut down, so it may be cut short (a trailer is, silently).
        return Outcome(error=body_cut(outcome.response, call.runtime.redact))  # type: ignore[arg-type]  # a requests.Response
    if ((fired and timed_out is not None) or isinstance(timed_out, requests.Timeout)) and (
        not isinstance(timed_out, DeadlineExceeded)
    ):
        cut = connect_cut if isinstance(timed_out, requests.ConnectTimeout) else read_cut
        if cut or fired:
            exceeded = DeadlineExceeded(
                f"deadline for {call.method} {call.state.key} ran out during try "
                f"{attempt.number}: {redact_text(str(timed_out), call.runtime.redact)}",
                request=attempt.request,
                # Kept, not chained: urllib3's text in it quotes the whole URL.
                original=timed_out,
            )
            return Outcome(error=exceeded)
    return outcome


def with_headers(
    request: requests.PreparedRequest, values: Iterable[tuple[str, str]]
) -> requests.PreparedRequest:
    """A copy of *request* that also sends the ``(name, value)`` pairs of *values*; the
    caller's request is never changed.

    ``PreparedRequest.copy()`` without the cookie jar's copy, and with the header map's store
    copied and written directly (a folded name maps to the name as given and its value, as
    ``CaseInsensitiveDict`` keeps them): this runs on every try, where ``copy()`` and a header
    set cost about 9 µs and this about 1.5. Nothing changes the jar of a request on its way
    out: requests copies a request before it changes its cookies (redirects), and so does
    ``Attempt.next``.
    """
    sent = _new_object(requests.PreparedRequest)
    # The instance dict copied whole rather than filled key by key: ~1,600 instructions less.
    sent.__dict__ = request.__dict__.copy()
    original: Any = request.headers
    if original is None:
        store: HeaderStore = OrderedDict()
    elif isinstance(original, CaseInsensitiveDict):
        # OrderedDict.copy, not dict(): a plain dict reads an OrderedDict through its keys
        # and costs half as much again (about 5,200 instructions against 3,500).
        store = header_store(original).copy()
    else:
        # Any other mapping (a plain dict put on a prepared request), which requests sends as
        # it is: read into the map requests would have made of it.
        store = header_store(CaseInsensitiveDict(original))
    for name, value in values:
        store[name.lower()] = (name, value)
    sent.headers = headers_of(store)
    return sent


_new_object = object.__new__


def attempt_value(attempt: Attempt) -> str:
    """``n; max=m``: this try's number and the most tries the call can make.

    A call that is not retried once it has reached the upstream (not idempotent, or a body
    that cannot be sent again) says this try is its last. While the request being served will
    be retried by its own caller, the value says so (n < m) even when this service makes one
    try, so the service below keeps to one try as well: one layer retries, the outermost.
    """
    call = attempt.call
    number = attempt.number
    most = call.state.policy.retry.max_attempts if call.idempotent and call.replayable else number
    # Below its most, a try says so whatever the caller intends: the contextvar is read only
    # for a last try (~600 instructions on every other).
    if most <= number and caller_retries():
        most = number + 1
    return _attempt_text(number, most)


# At most 100 tries a call (retry.max_attempts), so a few hundred texts cover every call.
_attempt_text = functools.lru_cache(maxsize=1024)(format_attempt)
