"""The values that flow through the pipeline: a call, an attempt, an outcome, a decision.

An outcome and a decision are NamedTuples rather than frozen dataclasses: equally immutable,
and built on every try, where a tuple is built in a fraction of the time. A call and an
attempt are classes with slots, set once when made and never changed after: read many times
a try, and a slot reads faster than a NamedTuple's field.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from .reason import Reason as Reason
from .wire import ErrorKind

if TYPE_CHECKING:
    from resilient_session._state.breaker import BreakerState
    from resilient_session._state.registry import HostState
    from resilient_session._state.runtime import Runtime
    from resilient_session._state.try_table import TryTable
    from resilient_session.config.policy import HostPolicy

    from .wire import Answer, Wire


class Verdict(str, Enum):
    """What happens after a try."""

    SUCCESS = "success"
    RETRY = "retry"
    GIVE_UP = "give_up"
    FAIL_FAST = "fail_fast"
    # Another try of the call answered first (hedging): this one's answer is dropped.
    CANCELLED = "cancelled"


class Decision(NamedTuple):
    """A verdict, its reason, and for a retry the seconds to wait first."""

    verdict: Verdict
    reason: Reason
    wait: float = 0.0


_new_tuple = tuple.__new__
_new_object = object.__new__

# What an outcome says until a stage decides: terminal, so a chain without a decide stage
# never loops.
UNDECIDED = Decision(Verdict.GIVE_UP, Reason.NOT_RETRYABLE)
ANSWERED = Decision(Verdict.SUCCESS, Reason.OK)


class Outcome(NamedTuple):
    """How one try ended: a response or an error, plus what was decided.

    Errors travel as values; only :meth:`unwrap` turns them back into a raised exception. Both
    are set only when a response's body was cut short: the error is what the caller gets.
    """

    response: Answer | None = None
    error: Exception | None = None
    decision: Decision = UNDECIDED
    # Set when the try was refused locally (a guard or a spent deadline) and never left.
    refused: Reason | None = None
    breaker: BreakerState | None = None
    # What the caller gets instead, when this try never reached the upstream (refused locally,
    # or a retry that could not connect): the last try that did.
    fallback: Outcome | None = None

    @property
    def status(self) -> int | None:
        return self.response.status_code if self.response is not None else None

    # These two run on every try.
    # hot path: positional-tuples
    def with_decision(self, decision: Decision) -> Outcome:
        response, error, _, refused, breaker, fallback = self
        return _new_tuple(Outcome, (response, error, decision, refused, breaker, fallback))

    def with_breaker(self, state: BreakerState) -> Outcome:
        response, error, decision, refused, _, fallback = self
        return _new_tuple(Outcome, (response, error, decision, refused, state, fallback))

    def unwrap(self) -> Answer:
        """The response the caller gets, or raise the exception the caller sees."""
        if self.fallback is not None:
            return self.fallback.unwrap()
        if self.error is not None:
            raise self.error
        if self.response is None:  # pragma: no cover - an Outcome always holds one of the two
            raise RuntimeError("outcome holds neither a response nor an error")
        return self.response


class Call:
    """What stays the same across the tries of one ``adapter.send``; made by
    ``call.start_call`` alone.

    A class with slots, not a NamedTuple: the stages read its fields about twenty times a
    call, and the interpreter reads a slot through its specialised path, a NamedTuple's field
    through a descriptor.
    """

    # hot path: slots

    __slots__ = (
        "cert",
        "deadline_at",
        "idempotent",
        "method",
        "policy",
        "proxies",
        "replayable",
        "request",
        "runtime",
        "started_at",
        "state",
        "stream",
        "table",
        "timeout",
        "url",
        "verify",
        "wire",
    )

    # The transport's request, as the call was given it (a ``requests.PreparedRequest`` on the
    # requests wire): the wire's to copy and send, the stages' only to hand back to it.
    request: Any
    # The request's URL as text, as the events and hooks name it (redacted).
    url: str
    method: str
    state: HostState
    # The policy the call runs on: the host's, or with the call's own settings over it
    # (``resilience=``, ``settings()``); the stages read it here, never on the state.
    policy: HostPolicy
    # What a finished try means, by the statuses of that policy (``state.table`` without
    # settings of the call's own).
    table: TryTable
    # The registry's clock, random source and redacted names: what the stages run on.
    runtime: Runtime
    # The transport's side of each decision (``wire.py``): the adapter's, not the registry's,
    # as one registry may serve calls of two transports.
    wire: Wire[Any, Any]
    stream: bool
    timeout: Any
    verify: bool | str
    cert: Any
    proxies: Mapping[str, str] | None
    deadline_at: float | None
    started_at: float
    idempotent: bool
    replayable: bool

    def replace(self, **changes: Any) -> Call:
        """A copy with the fields named in *changes* set to their values."""
        return _replaced(self, changes)

    def __repr__(self) -> str:
        return f"Call({self.method} {self.state.key}, deadline_at={self.deadline_at})"


class Attempt:
    """One try of a call: its number, and the request and timeout it sends.

    A class with slots, as ``Call`` is, for the same reason: the stages read its fields about
    a dozen times a try.
    """

    # hot path: slots

    __slots__ = ("call", "cookies", "last_real", "number", "request", "timeout")

    def __init__(
        self,
        call: Call,
        number: int,
        request: Any,
        timeout: Any,
        last_real: Outcome | None = None,
        # Cookies set by the answers of earlier tries, which were retried: this try's
        # request carries them, as requests carries cookies across redirect hops. The wire's
        # own jar (``Wire.carried_cookies``).
        cookies: Any = None,
    ) -> None:
        self.call = call
        self.number = number
        self.request = request
        self.timeout = timeout
        self.last_real = last_real
        self.cookies = cookies

    @classmethod
    def first(cls, call: Call) -> Attempt:
        return first_attempt(call)

    def next(self, outcome: Outcome) -> Attempt:
        """The attempt after *outcome*, remembering the last try that reached the upstream
        and any cookies its response set."""
        error = outcome.error
        # A try that could not connect never reached the upstream, as one refused locally.
        reached = outcome.refused is None and (
            error is None or self.call.wire.error_kind(error) is not ErrorKind.CONNECT
        )
        last_real = outcome if reached else self.last_real
        request, cookies = self.request, self.cookies
        answer = outcome.response
        if answer is not None:
            call = self.call
            carried = call.wire.carried_cookies(call.request, answer, cookies)
            if carried is not None:
                request, cookies = carried
        return Attempt(self.call, self.number + 1, request, self.call.timeout, last_real, cookies)

    def sending(self, request: Any, timeout: Any) -> Attempt:
        """This try, sending *request* with *timeout*."""
        # hot path: field-by-field
        attempt = _new_object(Attempt)
        attempt.call = self.call
        attempt.number = self.number
        attempt.request = request
        attempt.timeout = timeout
        attempt.last_real = self.last_real
        attempt.cookies = self.cookies
        return attempt

    def replace(self, **changes: Any) -> Attempt:
        """A copy with the fields named in *changes* set to their values."""
        return _replaced(self, changes)

    def __repr__(self) -> str:
        return f"Attempt({self.number} of {self.call!r})"


_Slotted = TypeVar("_Slotted", Call, Attempt)


def _replaced(value: _Slotted, changes: dict[str, Any]) -> _Slotted:
    """A copy of *value* (a Call or an Attempt) with *changes* set, every other field kept."""
    kind = type(value)
    copy = _new_object(kind)
    for name in kind.__slots__:
        setattr(copy, name, changes.pop(name, getattr(value, name)))
    if changes:
        raise TypeError(f"{kind.__name__} has no field {sorted(changes)[0]!r}")
    return copy


def first_attempt(call: Call) -> Attempt:
    """The first try of *call*, made field by field (the one made on every call)."""
    # hot path: field-by-field
    attempt = _new_object(Attempt)
    attempt.call = call
    attempt.number = 1
    attempt.request = call.request
    attempt.timeout = call.timeout
    attempt.last_real = None
    attempt.cookies = None
    return attempt
