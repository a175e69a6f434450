"""The retry settings the fallback and per-call tests share: backoffs of a few milliseconds,
so a call that retries against a loopback upstream ends within the test, and one try."""

from __future__ import annotations

from typing import Any

FAST: dict[str, Any] = {"backoff_base": 0.01, "backoff_cap": 0.02}
ONE_TRY: dict[str, Any] = {**FAST, "max_attempts": 1}
