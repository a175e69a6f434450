"""Streaming per-host figures from ``http.try`` and ``breaker.transition`` JSON lines.

Memory does not grow with the number of lines read: counters per host, and for latency a
log-bucketed histogram whose size is fixed by its range and accuracy, never a list of values.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

from .attempt import Verdict

TRY_EVENT: Final = "http.try"
TRANSITION_EVENT: Final = "breaker.transition"

# Quantiles are reported within this fraction of the exact value.
RELATIVE_ERROR: Final = 0.01

_VERDICTS: Final = frozenset(verdict.value for verdict in Verdict)
_BREAKER_STATES: Final = frozenset({"closed", "open", "half_open"})


class LogHistogram:
    """Counts of non-negative values in logarithmic buckets (the DDSketch layout).

    Bucket k holds the values in ``(gamma**(k-1), gamma**k]`` with
    ``gamma = (1 + relative_error) / (1 - relative_error)``, and a quantile is reported as the
    bucket's midpoint ``2 * gamma**k / (gamma + 1)``, which is within *relative_error* of every
    value in the bucket. So a reported quantile is within *relative_error* (1 % by default) of
    the exact nearest-rank quantile. Values below *min_value* count as 0 and values above
    *max_value* as *max_value*, so there are at most ``log(max_value / min_value) / log(gamma)``
    buckets (about 1,400 with the defaults) however many values are added.
    """

    def __init__(
        self,
        relative_error: float = RELATIVE_ERROR,
        min_value: float = 1e-6,
        max_value: float = 1e6,
    ) -> None:
        if not 0 < relative_error < 1:
            raise ValueError(f"relative_error must be in (0, 1), got {relative_error}")
        if not 0 < min_value < max_value:
            raise ValueError(f"need 0 < min_value < max_value, got {min_value}, {max_value}")
        self.relative_error = relative_error
        self._gamma = (1 + relative_error) / (1 - relative_error)
        self._log_gamma = math.log(self._gamma)
        self._min_value = min_value
        self._max_value = max_value
        self._buckets: dict[int, int] = {}
        self._zeros = 0
        self.count = 0

    @property
    def bucket_count(self) -> int:
        """Buckets in use, zeros included; bounded by the range, not by ``count``."""
        return len(self._buckets) + (1 if self._zeros else 0)

    def add(self, value: float) -> None:
        """Count one value; negative values are a caller's bug."""
        if value < 0 or math.isnan(value):
            raise ValueError(f"histogram values must be >= 0, got {value}")
        self.count += 1
        if value < self._min_value:
            self._zeros += 1
            return
        key = math.ceil(math.log(min(value, self._max_value)) / self._log_gamma)
        self._buckets[key] = self._buckets.get(key, 0) + 1

    def quantile(self, q: float) -> float | None:
        """The nearest-rank *q*-quantile (0 < q <= 1) within the relative error; None if empty."""
        if not 0 < q <= 1:
            raise ValueError(f"quantile must be in (0, 1], got {q}")
        if self.count == 0:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = self._zeros
        if seen >= rank:
            return 0.0
        for key in sorted(self._buckets):
            seen += self._buckets[key]
            if seen >= rank:
                return 2 * self._gamma**key / (self._gamma + 1)
        raise AssertionError("bucket counts do not add up to count")  # pragma: no cover


@dataclass
class HostStats:
    """Running figures for one ``scheme://host:port``."""

    tries: int = 0
    calls: int = 0
    retries: int = 0
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
            "retries": self.retries,
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
    other_event: int = 0
    malformed: int = 0

    @property
    def total(self) -> int:
        return self.not_json + self.other_event + self.malformed


class StatsAggregator:
    """Feed it JSON event lines one at a time; ask for per-host figures at any point.

    A call starts at the ``http.try`` whose ``attempt`` is 1 and ends at its first try whose
    ``decision`` is not ``retry``; that final try's ``total`` feeds the latency quantiles.
    Tries are counted per event, so interleaved calls from many threads need no pairing.

    Example::

        stats = StatsAggregator()
        stats.feed_lines(open("events.jsonl"))
        stats.summary()["hosts"]["https://api.example.com:443"]["tries_per_call"]
    """

    def __init__(self) -> None:
        self.hosts: dict[str, HostStats] = {}
        self.skipped = Skipped()
        self.lines = 0

    def feed_lines(self, lines: Iterable[str]) -> None:
        """Feed every line of *lines*; an iterator over a file keeps one line in memory."""
        for line in lines:
            self.feed(line)

    def feed(self, line: str) -> None:
        """Count one line: ours are aggregated, anything else is skipped and counted."""
        if not line.strip():
            return
        self.lines += 1
        try:
            event = json.loads(line)
        except ValueError:
            self.skipped.not_json += 1
            return
        if not isinstance(event, dict):
            self.skipped.not_json += 1
            return
        self.add(event)

    def add(self, event: Mapping[str, Any]) -> None:
        """Count one decoded event."""
        name = event.get("event")
        if name == TRY_EVENT:
            self._add_try(event)
        elif name == TRANSITION_EVENT:
            self._add_transition(event)
        else:
            self.skipped.other_event += 1

    def _host(self, key: str) -> HostStats:
        stats = self.hosts.get(key)
        if stats is None:
            stats = self.hosts[key] = HostStats()
        return stats

    def _add_try(self, event: Mapping[str, Any]) -> None:
        host = event.get("host")
        attempt = event.get("attempt")
        decision = event.get("decision")
        reason = event.get("reason")
        total = event.get("total")
        if not (
            isinstance(host, str)
            and _is_int(attempt)
            and attempt >= 1
            and decision in _VERDICTS
            and isinstance(reason, str)
            and _is_number(total)
            and total >= 0
        ):
            self.skipped.malformed += 1
            return
        stats = self._host(host)
        stats.tries += 1
        if attempt == 1:
            stats.calls += 1
        if decision == Verdict.RETRY.value:
            stats.retries += 1
            return
        if decision == Verdict.SUCCESS.value:
            stats.successes += 1
        elif decision == Verdict.GIVE_UP.value:
            stats.give_ups[reason] += 1
        else:
            stats.fail_fasts[reason] += 1
        stats.final_total.add(float(total))

    def _add_transition(self, event: Mapping[str, Any]) -> None:
        host = event.get("host")
        before = event.get("from")
        after = event.get("to")
        if not (isinstance(host, str) and before in _BREAKER_STATES and after in _BREAKER_STATES):
            self.skipped.malformed += 1
            return
        self._host(host).transitions[f"{before}->{after}"] += 1

    def summary(self) -> dict[str, Any]:
        """Everything as plain JSON-ready values, hosts in sorted order."""
        return {
            "hosts": {key: self.hosts[key].summary() for key in sorted(self.hosts)},
            "lines": self.lines,
            "skipped": {
                "total": self.skipped.total,
                "not_json": self.skipped.not_json,
                "other_event": self.skipped.other_event,
                "malformed": self.skipped.malformed,
            },
            "relative_error": RELATIVE_ERROR,
        }


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
