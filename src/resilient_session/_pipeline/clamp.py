"""The deadline's one rule for a try's timeouts, whichever transport sends it: a part longer
than the time the call has left, or with no limit, is cut to that time. Each wire reads its
library's timeouts into parts and writes the clamped parts back; the rule is here once."""

from __future__ import annotations


def seconds(value: object) -> float | None:
    """A timeout part as the caller gave it, in seconds; None for no limit of the caller's
    (None itself, a library's "default" sentinel, or anything but a real number)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def clamp(part: float | None, remaining: float) -> tuple[float, bool]:
    """*part* cut to *remaining* seconds, and whether it was cut (the deadline, not the try's
    own timeout, then ends that part of the try)."""
    if part is None or part > remaining:
        return remaining, True
    return part, False
