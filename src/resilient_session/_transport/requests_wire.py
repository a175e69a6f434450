"""The requests wire: the decisions' asks (``_pipeline/wire.py``) done with requests and
urllib3, on this package's connection classes and watchdog."""

from __future__ import annotations

from typing import Any

from resilient_session._pipeline.reason import Reason
from resilient_session._state.meaning import ErrorKind

from . import requests_errors


class RequestsWire:
    """The wire of ``ResilientAdapter`` and ``ResilientSession``: one, stateless, shared."""

    __slots__ = ()

    # -- errors: what one says, and the refusal for a reason ---------------------------------

    def error_kind(self, error: BaseException) -> ErrorKind:
        """What *error* says, by requests' exception classes and urllib3's causes
        (``requests_errors.py``)."""
        return requests_errors.error_kind(error)

    def refusal(
        self, reason: Reason, message: str, request: Any, original: BaseException | None = None
    ) -> Exception:
        """``CircuitOpenError``, ``ThrottledError``, ``ConcurrencyLimitError``,
        ``DeadlineExceeded`` or ``HedgeCancelled``, as *reason* says."""
        return requests_errors.refusal(reason, message, request, original)

    # -- the try's request: headers, timeouts, a bound in time -------------------------------

    # -- answers: release one a retry replaces, carry the cookies it set ---------------------


REQUESTS_WIRE = RequestsWire()
