"""Pure wait computations: full-jitter backoff and Retry-After parsing."""

from __future__ import annotations

import random
from datetime import timezone
from email.utils import parsedate_to_datetime

# 2**62 seconds is already far past any cap; stops float overflow for absurd attempt numbers.
_MAX_EXPONENT = 62


def full_jitter(retry: int, base: float, cap: float, rng: random.Random) -> float:
    """The wait before retry number *retry*: ``uniform(0, min(cap, base * 2**(retry-1)))``.

    Full jitter spreads a fleet's retries evenly over the window instead of in waves.
    """
    ceiling = min(cap, base * 2.0 ** min(retry - 1, _MAX_EXPONENT))
    return rng.uniform(0.0, ceiling)


def overload_backoff(retry: int, base: float, cap: float, rng: random.Random) -> float:
    """The wait before retry *retry* of an overloaded host that gave no Retry-After.

    The transient backoff with the base doubled: ``uniform(0, min(cap, base*2**retry))``.
    """
    return full_jitter(retry + 1, base, cap, rng)


def parse_retry_after(value: str | None, now_wall: float) -> float | None:
    """Seconds to wait from a Retry-After header value, or None when it cannot be used.

    RFC 9110 §10.2.3: the value is delay-seconds or an HTTP-date. Numbers are read as Python
    floats, so ``2.5`` and ``1e3`` count too. A delay past what a float holds (``1e400``, 400
    digits, ``inf``) is ``math.inf``, which the caller treats like any delay over its cap.
    ``-0`` and a date in the past mean no wait (0.0). NaN, negative values and text that is
    neither a number nor a date give None, so the caller falls back to backoff.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        return _seconds_until_date(text, now_wall)
    if seconds > 0:
        return seconds
    if seconds == 0:
        # "-0" parses as -0.0, which would be logged as a wait of -0.0.
        return 0.0
    return None  # negative, or NaN (which compares false to everything)


def _seconds_until_date(text: str, now_wall: float) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        # RFC 9110 §5.6.7: an HTTP-date is always GMT, so an unknown zone ("-0000") is GMT too.
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - now_wall)
