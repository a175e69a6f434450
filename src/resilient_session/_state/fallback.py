"""What a served fallback carries: why it ran, where the answer came from, and how old it is,
kept on the response it served and read back with ``fallback_of``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Final


class FallbackSource(str, Enum):
    """Where a fallback's answer came from."""

    # The host's last good answer to the same request (``fallback.stale``).
    STALE = "stale"
    # The ``fallback=`` callable the session or adapter was given.
    CALLABLE = "callable"


@dataclass(frozen=True, slots=True)
class FallbackInfo:
    """Why a call was answered by a fallback rather than by the network.

    Attributes:
        reason: the final ``http.try`` event's reason (``breaker_open``, ``max_attempts``,
            ``deadline``, ...).
        source: ``stale`` or ``callable``.
        age: a stale answer's age in whole seconds, as its ``Age`` header says; None for a
            callable's.
    """

    reason: str
    source: FallbackSource
    age: int | None = None


@dataclass(frozen=True, slots=True, repr=False)
class FailedCall:
    """What a ``fallback=`` callable is told of the call that failed.

    Attributes:
        request: the request as the caller prepared it (a ``requests.PreparedRequest``).
        host: ``scheme://host:port``, as the events name it.
        reason: the final ``http.try`` event's reason: ``breaker_open``, ``throttled``,
            ``concurrency_limit``, ``deadline_spent``, ``deadline``, ``budget_exhausted``,
            ``max_attempts``, ``retry_after_too_long``, ``not_idempotent``,
            ``body_not_replayable`` or ``not_retryable``; or ``response_too_large`` when the
            host answered well but the body was over ``retry.max_response_bytes``: the reasons
            of the ``http.fallback`` event, and of docs/events.schema.json's ``http_fallback``.
        response: the last answer from the network (a 5xx, 408, overload or other status a
            tier retries; or the answer whose body was too large), or None.
        error: the exception the call would raise, or None when it would return *response*.
    """

    request: Any
    host: str
    reason: str
    response: Any
    error: BaseException | None

    def __repr__(self) -> str:
        # The error by its class alone: a transport's own error text quotes the URL whole,
        # query secrets and all, and a fallback's log line must not carry them.
        error = None if self.error is None else type(self.error).__name__
        return (
            f"FailedCall(request={self.request!r}, host={self.host!r}, reason={self.reason!r}, "
            f"response={self.response!r}, error={error})"
        )


# The reason a fallback is told when the host answered well but the call would raise because
# the body was over ``retry.max_response_bytes``: no ``http.try`` reason says it (that try's
# decision is its status's own, ``ok`` for a 200), and the call fails for the size alone.
RESPONSE_TOO_LARGE: Final = "response_too_large"


# One private attribute on the response object, whatever its library: requests' Response and
# httpx's both take new attributes, and a response from the network never has it.
MARK: Final = "_resilient_session_fallback"


def mark(response: object, info: FallbackInfo) -> None:
    """Record on *response* that a fallback served it."""
    setattr(response, MARK, info)


def fallback_of(response: object) -> FallbackInfo | None:
    """Why *response* was served by a fallback, or None for an answer from the network.

    Example::

        response = session.get(url)
        if (info := resilient_session.fallback_of(response)) is not None:
            log.warning("served stale", reason=info.reason, age=info.age)
    """
    info = getattr(response, MARK, None)
    return info if isinstance(info, FallbackInfo) else None
