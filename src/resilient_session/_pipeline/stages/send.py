"""The send stage: innermost, present only when a hook adds headers to the tries it sees leave
(a trace context), so a chain without such a hook pays nothing for it."""

from __future__ import annotations

from resilient_session._observe.hooks import TrySending
from resilient_session._observe.redact import redact_url
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.drive import Next


def tell_senders(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Inside every guard, so only a try that leaves is seen; its headers go on this try's own
    copy of the request, never on the caller's."""
    call = attempt.call
    runtime = call.runtime
    state = call.state
    sending = TrySending(
        call.method,
        redact_url(call.url, runtime.redact),
        state.host,
        attempt.number,
        state.route,
    )
    headers: list[tuple[str, str]] = []
    for sender in runtime.senders:
        headers.extend(sender.on_send(sending))
    if headers:
        attempt = attempt.sending(
            call.wire.with_headers(attempt.request, headers, False), attempt.timeout
        )
    return call_next(attempt)
