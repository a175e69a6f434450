"""Which tier an outcome falls in, and whether a failure happened before the request left."""

from __future__ import annotations

from enum import Enum

import requests

from resilient_session.config.policy import RetryPolicy

from .attempt import Outcome


class Tier(str, Enum):
    """How an outcome is treated."""

    SUCCESS = "success"
    NEVER = "never"
    TRANSIENT = "transient"
    OVERLOAD = "overload"


# Retrying these only hides a configuration problem: a bad certificate, a malformed URL, a
# proxy that wants credentials. They never count against the breaker either.
_NEVER_ERRORS: tuple[type[Exception], ...] = (
    requests.exceptions.SSLError,
    requests.exceptions.InvalidURL,
    requests.exceptions.InvalidSchema,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidHeader,
)

_TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
)


def classify(outcome: Outcome, policy: RetryPolicy) -> Tier:
    """The tier of *outcome* under *policy*; each try is classified afresh."""
    response = outcome.response
    if response is not None:
        status = response.status_code
        if status < 400:
            return Tier.SUCCESS
        if status in policy.overload_statuses:
            return Tier.OVERLOAD
        if status in policy.transient_statuses:
            return Tier.TRANSIENT
        return Tier.NEVER
    return Tier.TRANSIENT if is_transient_error(outcome.error) else Tier.NEVER


def is_transient_error(error: BaseException | None) -> bool:
    """True for transport failures worth another try; False for configuration-shaped errors."""
    if error is None or isinstance(error, _NEVER_ERRORS):
        return False
    if isinstance(error, requests.exceptions.ProxyError):
        # A proxy that answers 407 wants credentials; asking again will not change that.
        return "407" not in str(error)
    return isinstance(error, _TRANSIENT_ERRORS)
