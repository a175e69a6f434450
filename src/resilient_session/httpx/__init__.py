"""resilient_session for httpx: the same retries, deadlines and per-host guards for
``httpx.Client`` and ``httpx.AsyncClient``, on the same per-host state as ``ResilientSession``.

Needs the ``httpx`` extra (``pip install resilient-session[httpx]``); ``import
resilient_session`` never loads this module, nor httpx.

- :class:`ResilientTransport`: one transport for both clients (``httpx.Client(transport=t)``,
  ``httpx.AsyncClient(transport=t)``), each try sent through an inner httpx transport with
  ``retries=0`` so every try is visible (respx and pytest-httpx see each one).
- :class:`ResilientClient`, :class:`AsyncResilientClient`: clients on it that take
  ``deadline=`` per request and read a non-streamed body inside the try, so a reset mid-body
  is retried and the deadline covers the body.
- The errors, in httpx's family: ``CircuitOpenError``, ``ThrottledError``,
  ``ConcurrencyLimitError``, ``ResponseTooLarge`` and ``HedgeCancelled`` are
  ``httpx.TransportError``; ``DeadlineExceeded`` is an ``httpx.TimeoutException``.
"""

from __future__ import annotations

from resilient_session._transport.httpx_errors import (
    CircuitOpenError,
    ConcurrencyLimitError,
    DeadlineExceeded,
    HedgeCancelled,
    ResponseTooLarge,
    ThrottledError,
)

from .client import AsyncResilientClient, ResilientClient
from .transport import ResilientTransport

__all__ = [
    "AsyncResilientClient",
    "CircuitOpenError",
    "ConcurrencyLimitError",
    "DeadlineExceeded",
    "HedgeCancelled",
    "ResilientClient",
    "ResilientTransport",
    "ResponseTooLarge",
    "ThrottledError",
]
