"""The ``X-Request-Attempt`` value each try sends: the format the deadline stage writes and
the inbound middleware reads."""

from __future__ import annotations


def format_attempt(number: int, max_attempts: int) -> str:
    """The ``X-Request-Attempt`` value of try *number* out of at most *max_attempts*."""
    return f"{number}; max={max_attempts}"
