"""Inbound middleware: serve a request under its caller's deadline and retry intent, so that a
chain of services using this library retries at one layer and stops when the caller stops."""

from __future__ import annotations

from resilient_session._hops import AttemptHeader, format_attempt, parse_attempt, parse_timeout_ms

from .asgi import ASGIMiddleware
from .wsgi import WSGIMiddleware

__all__ = [
    "ASGIMiddleware",
    "AttemptHeader",
    "WSGIMiddleware",
    "format_attempt",
    "parse_attempt",
    "parse_timeout_ms",
]
