"""Streaming per-host figures from ``http.try`` and ``breaker.transition`` JSON lines.

Memory is bounded whatever the input: a line over ``MAX_LINE`` characters is skipped without
being held whole, the first ``MAX_HOSTS`` hosts get a row each and the rest share one, and
latency is a log-bucketed histogram of fixed size, never a list of values. No line can stop
the count: a line that is not one of our events, whatever its shape, is skipped and counted
by why."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol, TypeGuard

from resilient_session._pipeline.attempt import Reason, Verdict

from .figures import HostStats, Skipped
from .sketch import RELATIVE_ERROR, DistinctCounter

TRY_EVENT: Final = "http.try"
TRANSITION_EVENT: Final = "breaker.transition"
DEGRADED_EVENT: Final = "state.degraded"
RESTORED_EVENT: Final = "state.restored"

# 64 KiB, the newline included: about 200 times one of our events. Past it a line is not ours,
# and is skipped a piece at a time, never held whole.
MAX_LINE: Final = 65_536
# Hosts past the first 1,000 seen share one row, so a log of a million distinct hosts costs
# what a log of a thousand does (a host's row is a few kilobytes).
MAX_HOSTS: Final = 1_000
# A DNS name is at most 253 characters; with scheme and port a host key fits well within this.
MAX_HOST_LENGTH: Final = 512
# Where a JSON log line names its event: structlog's JSONRenderer writes ``event``,
# python-json-logger ``message``, and a stdlib formatter dumping the record's fields ``msg``.
NAME_KEYS: Final = ("event", "message", "msg")

_NAMES: Final = frozenset({TRY_EVENT, TRANSITION_EVENT, DEGRADED_EVENT, RESTORED_EVENT})

_VERDICTS: Final = frozenset(verdict.value for verdict in Verdict)
_REASONS: Final = frozenset(reason.value for reason in Reason)
_BREAKER_STATES: Final = frozenset({"closed", "open", "half_open"})
_RETRY: Final = Verdict.RETRY.value
_SUCCESS: Final = Verdict.SUCCESS.value
_FAIL_FAST: Final = Verdict.FAIL_FAST.value
_CANCELLED: Final = Verdict.CANCELLED.value


class _Lines(Protocol):
    def readline(self, size: int = -1, /) -> str: ...


class StatsAggregator:
    """Feed it JSON event lines one at a time; ask for per-host figures at any point.

    A call starts at the ``http.try`` whose ``attempt`` is 1 and ends at its first try whose
    ``decision`` is neither ``retry`` nor ``cancelled`` (a try of a hedged call another of its
    tries beat); that final try's ``total`` feeds the latency quantiles.
    Tries are counted per event, so interleaved calls from many threads need no pairing.

    Example::

        stats = StatsAggregator()
        with open("events.jsonl", encoding="utf-8", errors="replace") as lines:
            stats.feed_file(lines)
        stats.summary()["hosts"]["https://api.example.com:443"]["tries_per_call"]
    """

    def __init__(self, max_hosts: int = MAX_HOSTS) -> None:
        self.hosts: dict[str, HostStats] = {}
        # Everything of the hosts past max_hosts; None until the first one is seen.
        self.other_hosts: HostStats | None = None
        self._folded = DistinctCounter()
        self._max_hosts = max_hosts
        self.skipped = Skipped()
        self.lines = 0
        self.used = 0
        # Per worker, not per host: the redis state backend went out of reach, or came back.
        self.state_degraded = 0
        self.state_restored = 0

    def feed_file(self, stream: _Lines) -> None:
        """Feed every line of *stream*, holding at most ``MAX_LINE`` characters at a time."""
        while line := stream.readline(MAX_LINE + 1):
            if len(line) > MAX_LINE and not line.endswith("\n"):
                _discard_rest_of_line(stream)
            self.feed(line)

    def feed_lines(self, lines: Iterable[str]) -> None:
        """Feed every line of *lines*, each already whole in memory."""
        for line in lines:
            self.feed(line)

    def feed(self, line: str) -> None:
        """Count one line: ours are aggregated, anything else is skipped and counted."""
        if len(line) > MAX_LINE:
            self.lines += 1
            self.skipped.too_long += 1
            return
        if not line.strip():
            return
        self.lines += 1
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            # RecursionError: nested deeper than the parser's stack goes, as no event of ours is.
            self.skipped.not_json += 1
            return
        if not isinstance(event, dict):
            self.skipped.not_json += 1
            return
        self.add(event)

    def add(self, event: Mapping[str, Any]) -> None:
        """Count one decoded event; every field read is checked for type and range first."""
        name = _event_name(event)
        if name == TRY_EVENT:
            self._add_try(event)
        elif name == TRANSITION_EVENT:
            self._add_transition(event)
        elif name in (DEGRADED_EVENT, RESTORED_EVENT):
            self._add_state_change(name, event)
        else:
            self.skipped.other_event += 1

    def _host(self, key: str) -> HostStats:
        stats = self.hosts.get(key)
        if stats is not None:
            return stats
        if len(self.hosts) < self._max_hosts:
            stats = self.hosts[key] = HostStats()
            return stats
        self._folded.add(key)
        if self.other_hosts is None:
            self.other_hosts = HostStats()
        return self.other_hosts

    def _add_try(self, event: Mapping[str, Any]) -> None:
        host = event.get("host")
        attempt = event.get("attempt")
        decision = event.get("decision")
        reason = event.get("reason")
        total = _seconds(event.get("total"))
        if not (
            _is_host(host)
            and _is_int(attempt)
            and attempt >= 1
            and _is_one_of(decision, _VERDICTS)
            and _is_one_of(reason, _REASONS)
            and total is not None
        ):
            self.skipped.malformed += 1
            return
        self.used += 1
        stats = self._host(host)
        if attempt == 1:
            stats.calls += 1
        if decision == _FAIL_FAST:
            stats.refused += 1
            stats.fail_fasts[reason] += 1
            stats.final_total.add(total)
            return
        if event.get("hedge") is True:
            stats.hedges += 1
        if decision == _CANCELLED:
            stats.cancelled += 1
            return
        stats.tries += 1
        if decision == _RETRY:
            stats.retries += 1
            return
        if decision == _SUCCESS:
            stats.successes += 1
        else:
            stats.give_ups[reason] += 1
        stats.final_total.add(total)

    def _add_transition(self, event: Mapping[str, Any]) -> None:
        host = event.get("host")
        before = event.get("from")
        after = event.get("to")
        if not (
            _is_host(host)
            and _is_one_of(before, _BREAKER_STATES)
            and _is_one_of(after, _BREAKER_STATES)
        ):
            self.skipped.malformed += 1
            return
        self.used += 1
        self._host(host).transitions[f"{before}->{after}"] += 1

    def _add_state_change(self, name: str, event: Mapping[str, Any]) -> None:
        if not isinstance(event.get("backend"), str):
            self.skipped.malformed += 1
            return
        self.used += 1
        if name == DEGRADED_EVENT:
            self.state_degraded += 1
        else:
            self.state_restored += 1

    def summary(self) -> dict[str, Any]:
        """Everything as plain JSON-ready values, hosts in sorted order."""
        other = self.other_hosts
        return {
            "hosts": {key: self.hosts[key].summary() for key in sorted(self.hosts)},
            "other_hosts": other.summary() if other is not None else None,
            "hosts_folded": self._folded.estimate() if other is not None else 0,
            "max_hosts": self._max_hosts,
            "state": {"degraded": self.state_degraded, "restored": self.state_restored},
            "lines": self.lines,
            "used": self.used,
            "skipped": {
                "total": self.skipped.total,
                "not_json": self.skipped.not_json,
                "too_long": self.skipped.too_long,
                "other_event": self.skipped.other_event,
                "malformed": self.skipped.malformed,
            },
            "relative_error": RELATIVE_ERROR,
        }


def _event_name(event: Mapping[str, Any]) -> str | None:
    """The name of one of our events, under whichever key the log's formatter put it."""
    for key in NAME_KEYS:
        name = event.get(key)
        if _is_one_of(name, _NAMES):
            return name
    return None


def _discard_rest_of_line(stream: _Lines) -> None:
    while chunk := stream.readline(MAX_LINE):
        if chunk.endswith("\n"):
            return


def _is_host(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_HOST_LENGTH


def _is_one_of(value: object, allowed: frozenset[str]) -> TypeGuard[str]:
    # The type first: a list or dict is unhashable, and `in` a set would raise TypeError.
    return isinstance(value, str) and value in allowed


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _seconds(value: object) -> float | None:
    """*value* as a float when it is a finite number >= 0, else None."""
    if isinstance(value, float):
        return value if 0 <= value < math.inf else None  # NaN fails both comparisons
    # An int is compared before it is converted: float(10**400) raises OverflowError.
    if _is_int(value) and 0 <= value <= sys.float_info.max:
        return float(value)
    return None
