"""The wire: what the decisions ask of a transport, and nothing else.

The stages decide (retry or not, how long a try may take, which headers it carries, what a
refusal is for); a wire does what only the transport knows how to do: classify one of its
errors, make the exception a caller of that transport expects, put headers on its request,
read and clamp its timeouts, bound a try in time, release an answer a retry replaces and carry
the cookies an answer set. The requests wire (``_transport/requests_wire.py``) is one; each
call carries its own (``Call.wire``), so one registry's guards can serve calls of two
transports at once.

Two Protocols and no code: ``_pipeline`` and ``_state`` name no transport library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

# The table's error half is keyed by it, so it lives with the table, below the pipeline.
from resilient_session._state.try_table import ErrorKind as ErrorKind

from .reason import Reason

if TYPE_CHECKING:
    from resilient_session._state.fallback import FallbackInfo
    from resilient_session._state.runtime import Runtime
    from resilient_session._state.stale import StaleHit


class Answer(Protocol):
    """A transport's response as the decisions read it: ``requests.Response`` and
    ``httpx.Response`` both fit as they are."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def close(self) -> None: ...


class Bound(Protocol):
    """One try's bound in time (``Wire.bounded``): entered around the try, read after it."""

    @property
    def fired(self) -> bool:
        """After the try: True when the bound cut it short."""
        ...

    def __enter__(self) -> Bound: ...

    def __exit__(self, *exc_info: object) -> None: ...


class RaceBound(Bound, Protocol):
    """The bound of one try of a hedged call's race (``Wire.raced``), which the race holds."""

    def cut(self) -> None:
        """End the try now, from any thread: another try of its race answered first."""
        ...

    def pass_on(self) -> None:
        """After a try that won: a firing of this bound counts as the firing of the bound
        around it (``Wire.bounded``), so the deadline stage sees a try its deadline cut."""
        ...

    def hedge_wait(self, delay: float) -> float:
        """Seconds a hedge of this try should still wait, its race's *delay* having passed on
        the caller's clock: more while the answer is in, what is left of the delay since the
        request really went out, or 0 (out for the delay with no answer, or no one can tell)."""
        ...


# A wire's own request and answer types (``requests.PreparedRequest`` and ``requests.Response``
# for requests'): the stages hold them as ``Any`` and hand them back, so only each wire's
# signatures are checked against its library's types.
RequestT = TypeVar("RequestT")
AnswerT = TypeVar("AnswerT", bound=Answer)


class Wire(Protocol[RequestT, AnswerT]):
    """What the stages ask of the transport a call goes out on."""

    # -- errors: what one says, and the refusal for a reason ---------------------------------

    def error_kind(self, error: BaseException) -> ErrorKind:
        """What *error*, which a try on this transport ended with, says: the request never
        left (CONNECT), a transport failure worth another try (TRANSIENT), a cut by the
        caller's deadline (DEADLINE_CUT), or an error of ours no retry mends (OURS)."""
        ...

    def refusal(
        self,
        reason: Reason,
        message: str,
        request: RequestT,
        original: BaseException | None = None,
    ) -> Exception:
        """The exception a caller of this transport expects for a try refused or cut for
        *reason*, saying *message*, about *request*; *original* is the error it stands for,
        kept unprinted (a timeout the deadline cut short), None for a try never sent."""
        ...

    # -- the try's request: headers, timeouts, a bound in time -------------------------------

    def with_headers(
        self, request: RequestT, pairs: Iterable[tuple[str, str]], first: bool
    ) -> RequestT:
        """*request* sending the ``(name, value)`` *pairs* too: a copy, the caller's request
        left as it was, but for a call's *first* try of a request that call alone holds
        (``mark_owned``), written into the request itself."""
        ...

    def with_header(self, request: RequestT, name: str, value: str, first: bool) -> RequestT:
        """``with_headers`` for the one header of a try without a deadline, its attempt
        header: written without a list of pairs to build and walk, on every such try."""
        ...

    def timeouts(self, timeout: Any) -> tuple[float | None, float | None]:
        """``(connect, read)`` seconds of a timeout the transport accepts; None is no limit."""
        ...

    def clamped(self, timeout: Any, remaining: float) -> tuple[Any, bool, bool]:
        """*timeout* with no part longer than *remaining*, and whether the connect and the
        read part were cut to it (the deadline, not the try's own timeout, then ends them)."""
        ...

    def bounded(self, remaining: float, body: bool) -> Bound:
        """A bound ending the try entered in it *remaining* seconds from now, wherever it is:
        up to the body's last byte when *body*, else (the caller streams the body) up to its
        headers."""
        ...

    def raced(self) -> RaceBound:
        """A bound for one try of a hedged call's race: it ends where the bound around it
        ends (``bounded``, none without a deadline), or sooner, when the race cuts it."""
        ...

    def deadline_error(
        self,
        fired: bool,
        error: BaseException | None,
        answer: AnswerT | None,
        cuts: tuple[bool, bool],
        message: str,
        request: RequestT,
        redact: frozenset[str],
    ) -> Exception | None:
        """What a try ended with under a bound that *fired* or not, as the caller sees it, or
        None to keep its own ending: the deadline error for a timeout the deadline caused (one
        of the ``cuts`` parts, as ``clamped`` said) or a cut, *message* followed by the
        error's text redacted of *redact*, the error kept as its ``original``; for an
        *answer* whose body the bound cut short, the answer closed and the deadline error."""
        ...

    def cut_connecting(self, error: BaseException) -> bool:
        """Whether *error*, a try the deadline cut short, was cut before its connection was
        made, so the try's own connect timeout (not its read timeout) was the one running."""
        ...

    # -- answers: release one a retry replaces, carry the cookies it set ---------------------

    def release(
        self, answer: AnswerT, deadline_at: float | None, runtime: Runtime
    ) -> Exception | None:
        """Let go of *answer*, which a retry will replace: read a bounded share of its body, so
        its connection may go back to the pool and it still reads should the call end with it
        after all, then close it.

        Returns:
            None; or, when the caller's deadline (*deadline_at*, on *runtime*'s clock) ran out
            during the read, the exception the call ends with instead of the retry.
        """
        ...

    def carried_cookies(
        self, request: RequestT, answer: AnswerT, carried: Any
    ) -> tuple[RequestT, Any] | None:
        """What the try after *answer* sends when *answer* set cookies, as a redirect hop
        would: a copy of the call's *request* carrying them on top of *carried* (the cookies
        earlier retried answers set, or None), and the cookies now carried.

        Returns:
            (request, cookies) for the next try; None when *answer* set no cookie, so the next
            try sends what this one did.
        """
        ...

    # -- fallback: what a call's answer holds, an answer made from a stored one, the mark ----

    def is_answer(self, value: object) -> bool:
        """Whether *value*, which a ``fallback=`` callable returned, is an answer a caller of
        this transport can be given."""
        ...

    def body(self, answer: AnswerT) -> bytes:
        """The body of *answer*, already read whole (the caller does not stream it)."""
        ...

    def stored_answer(self, request: RequestT, hit: StaleHit) -> AnswerT:
        """A new answer to *request* made from the stored one *hit* holds: its status, its
        headers with ``Age``, its body; read whole, nothing left open."""
        ...

    def mark(self, answer: AnswerT, info: FallbackInfo) -> None:
        """Record on *answer* that a fallback served it, for ``fallback_of`` to read."""
        ...
