"""The figures ``stats`` keeps while it reads: per host, and of the lines it skipped."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .sketch import LogHistogram


@dataclass
class HostStats:
    """Running figures for one ``scheme://host:port``.

    A try is one sent toward the upstream: a ``fail_fast`` event (breaker open, deadline
    spent) sent nothing, so it counts as ``refused``, not as a try, and a ``cancelled`` one
    (another try of its hedged call ended first) counts as ``cancelled``, as
    ``session.health()`` counts them.
    """

    tries: int = 0
    refused: int = 0
    calls: int = 0
    retries: int = 0
    hedges: int = 0
    cancelled: int = 0
    successes: int = 0
    give_ups: Counter[str] = field(default_factory=Counter)
    fail_fasts: Counter[str] = field(default_factory=Counter)
    transitions: Counter[str] = field(default_factory=Counter)
    final_total: LogHistogram = field(default_factory=LogHistogram)

    @property
    def tries_per_call(self) -> float | None:
        return self.tries / self.calls if self.calls else None

    @property
    def breaker_trips(self) -> int:
        """Transitions into ``open``, from closed or from a failed half-open probe."""
        return sum(count for key, count in self.transitions.items() if key.endswith("->open"))

    def summary(self) -> dict[str, Any]:
        """The figures as plain JSON-ready values."""
        per_call = self.tries_per_call
        p50 = self.final_total.quantile(0.5)
        p99 = self.final_total.quantile(0.99)
        return {
            "calls": self.calls,
            "tries": self.tries,
            "tries_per_call": round(per_call, 3) if per_call is not None else None,
            "refused": self.refused,
            "retries": self.retries,
            "hedges": self.hedges,
            "cancelled": self.cancelled,
            "successes": self.successes,
            "give_ups": dict(sorted(self.give_ups.items())),
            "fail_fasts": dict(sorted(self.fail_fasts.items())),
            "breaker_transitions": dict(sorted(self.transitions.items())),
            "breaker_trips": self.breaker_trips,
            "final_tries": self.final_total.count,
            "total_p50": round(p50, 6) if p50 is not None else None,
            "total_p99": round(p99, 6) if p99 is not None else None,
        }


@dataclass
class Skipped:
    """Lines that were read but not counted, by why."""

    not_json: int = 0
    too_long: int = 0
    other_event: int = 0
    malformed: int = 0

    @property
    def total(self) -> int:
        return self.not_json + self.too_long + self.other_event + self.malformed
