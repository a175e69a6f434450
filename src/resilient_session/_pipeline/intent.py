"""The caller's retry intent: whether calls made while serving a request make one try each.

The inbound middleware sets it when the request's caller says it may try again
(``X-Request-Attempt: n; max=m`` with n < m): that retry repeats the whole call, so a retry
here as well would multiply the tries that reach the services below.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

_SINGLE_TRY: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "resilient_session_single_try", default=False
)

# True while the caller of the request being served will retry it; read once per failed try.
caller_retries: Callable[[], bool] = _SINGLE_TRY.get


def enter(single_try: bool) -> contextvars.Token[bool]:
    """Put *single_try* in force until ``leave(token)``."""
    return _SINGLE_TRY.set(single_try)


leave: Callable[[contextvars.Token[bool]], None] = _SINGLE_TRY.reset
