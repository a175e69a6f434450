"""The fields the event contract (docs/events.md) puts in every ``http.try`` event."""

from __future__ import annotations

HTTP_TRY_FIELDS = frozenset(
    {
        "event",
        "method",
        "url",
        "host",
        "route",
        "attempt",
        "status",
        "error",
        "wait",
        "total",
        "decision",
        "reason",
        "breaker",
    }
)
