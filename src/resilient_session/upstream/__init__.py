"""Re-export: moved to resilient_session.testing.upstream; this path keeps working."""

from __future__ import annotations

from resilient_session.testing.upstream import (
    MAX_WAIT,
    CloseWithoutReply,
    Drip,
    Flaky,
    FlakyUpstream,
    Hang,
    Hit,
    Reply,
    ResetMidBody,
    Step,
    Trickle,
    refused_url,
)

__all__ = [
    "MAX_WAIT",
    "CloseWithoutReply",
    "Drip",
    "Flaky",
    "FlakyUpstream",
    "Hang",
    "Hit",
    "Reply",
    "ResetMidBody",
    "Step",
    "Trickle",
    "refused_url",
]
