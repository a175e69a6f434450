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
from typing import Any, Protocol

# The table's error half is keyed by it, so it lives with the table, below the pipeline.
from resilient_session._state.meaning import ErrorKind as ErrorKind

from .reason import Reason


class Answer(Protocol):
    """A transport's response as the decisions read it: ``requests.Response`` and
    ``httpx.Response`` both fit as they are."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def close(self) -> None: ...


class Wire(Protocol):
    """What the stages ask of the transport a call goes out on."""

    # -- errors: what one says, and the refusal for a reason ---------------------------------

    def error_kind(self, error: BaseException) -> ErrorKind:
        """What *error*, which a try on this transport ended with, says: the request never
        left (CONNECT), a transport failure worth another try (TRANSIENT), a cut by the
        caller's deadline (DEADLINE_CUT), or an error of ours no retry mends (OURS)."""
        ...

    def refusal(
        self, reason: Reason, message: str, request: Any, original: BaseException | None = None
    ) -> Exception:
        """The exception a caller of this transport expects for a try refused or cut for
        *reason*, saying *message*, about *request*; *original* is the error it stands for,
        kept unprinted (a timeout the deadline cut short), None for a try never sent."""
        ...

    # -- the try's request: headers, timeouts, a bound in time -------------------------------

    # -- answers: release one a retry replaces, carry the cookies it set ---------------------
