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

from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from resilient_session._state.runtime import Runtime


class Answer(Protocol):
    """A transport's response as the decisions read it: ``requests.Response`` and
    ``httpx.Response`` both fit as they are."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def close(self) -> None: ...


class ErrorKind(str, Enum):
    """What a try's error says, whatever the transport that raised it."""

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


class Wire(Protocol):
    """What the stages ask of the transport a call goes out on."""

    # -- errors: what one says, and the refusal for a reason ---------------------------------

    # -- the try's request: headers, timeouts, a bound in time -------------------------------

    # -- answers: release one a retry replaces, carry the cookies it set ---------------------

    def release(
        self, answer: Answer, deadline_at: float | None, runtime: Runtime
    ) -> Exception | None:
        """Let go of *answer*, which a retry will replace: read a bounded share of its body, so
        its connection may go back to the pool and it still reads should the call end with it
        after all, then close it.

        Returns:
            None; or, when the caller's deadline (*deadline_at*, on *runtime*'s clock) ran out
            during the read, the exception the call ends with instead of the retry.
        """
        ...

    def carried_cookies(self, request: Any, answer: Answer, carried: Any) -> tuple[Any, Any] | None:
        """What the try after *answer* sends when *answer* set cookies, as a redirect hop
        would: a copy of the call's *request* carrying them on top of *carried* (the cookies
        earlier retried answers set, or None), and the cookies now carried.

        Returns:
            (request, cookies) for the next try; None when *answer* set no cookie, so the next
            try sends what this one did.
        """
        ...
