"""The two headers a call tells the next hop with, ``X-Request-Timeout-Ms`` and
``X-Request-Attempt``: their names, the attempt value's format, and the parsers the inbound
middleware reads them with; anything malformed reads as absent.

The deadline stage writes them and ``inbound/`` reads them, so what one sends the other reads
by construction (a leaf: it imports nothing of the package)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, NamedTuple

# The names sent unless the config names others (``deadline.header``, ``attempt_header``).
TIMEOUT_HEADER: Final = "X-Request-Timeout-Ms"
ATTEMPT_HEADER: Final = "X-Request-Attempt"

# Integer milliseconds, as the library sends them. Fifteen digits (over 30,000 years) is more
# than any max_ms allows, and keeps int() cheap on a hostile value.
_MILLISECONDS: Final = re.compile(r"[0-9]{1,15}")
_COUNT: Final = re.compile(r"[0-9]{1,9}")
# RFC 9110 section 5.6.2: a parameter name is a token; a value a token too (no quoted strings).
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# RFC 9110 section 5.6.3: optional whitespace is spaces and tabs.
_OWS: Final = " \t"

__all__ = [
    "ATTEMPT_HEADER",
    "TIMEOUT_HEADER",
    "AttemptHeader",
    "format_attempt",
    "parse_attempt",
    "parse_timeout_ms",
    "single",
]


class AttemptHeader(NamedTuple):
    """The caller's try number and the most tries it will make."""

    number: int
    max_attempts: int

    @property
    def caller_retries(self) -> bool:
        """True when the caller may try again after this try."""
        return self.number < self.max_attempts


def format_attempt(number: int, max_attempts: int) -> str:
    """The ``X-Request-Attempt`` value of try *number* out of at most *max_attempts*."""
    return f"{number}; max={max_attempts}"


def single(values: Sequence[str]) -> str | None:
    """The one value of a header, or None when it is absent or sent more than once.

    Two values (duplicate fields, or one field a proxy joined with a comma) leave no way to
    tell which is meant, so neither is.
    """
    if len(values) != 1:
        return None
    value = values[0]
    return None if "," in value else value


def parse_timeout_ms(value: str | None, max_ms: int) -> int | None:
    """The milliseconds an ``X-Request-Timeout-Ms`` value gives, or None when it is absent,
    malformed (a sign, a fraction, a unit, anything but ASCII digits) or above *max_ms*.

    Zero is kept: the caller had less than a millisecond left.
    """
    if value is None:
        return None
    text = value.strip(_OWS)
    if not _MILLISECONDS.fullmatch(text):
        return None
    milliseconds = int(text)
    return milliseconds if milliseconds <= max_ms else None


def parse_attempt(value: str | None) -> AttemptHeader | None:
    """The ``n; max=m`` of an ``X-Request-Attempt`` value, or None when it is absent or
    malformed: n and m are ASCII integers with 1 <= n <= m, ``max`` appears exactly once, and
    every other parameter is a well-formed ``name=value`` (it is ignored, so a later sender may
    add one)."""
    if value is None:
        return None
    first, *params = value.split(";")
    number = _count(first)
    if number is None:
        return None
    max_attempts: int | None = None
    for param in params:
        name, equals, raw = param.strip(_OWS).partition("=")
        if not equals or not _TOKEN.fullmatch(name) or not _TOKEN.fullmatch(raw):
            return None
        if name.lower() == "max":
            if max_attempts is not None:
                return None
            max_attempts = _count(raw)
            if max_attempts is None:
                return None
    if max_attempts is None or not 1 <= number <= max_attempts:
        return None
    return AttemptHeader(number, max_attempts)


def _count(text: str) -> int | None:
    text = text.strip(_OWS)
    return int(text) if _COUNT.fullmatch(text) else None
