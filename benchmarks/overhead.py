"""What ResilientSession costs per call over requests.Session, and where the time goes.

Cases, each timing both sessions in one run, interleaved (plain, resilient, plain, ...), so a
change in the machine's speed lands on both halves of a pair:

  a  no network: ``HTTPAdapter.send`` answers at once, as ``responses`` does; µs per call with
     events off (structlog unconfigured), filtered (a WARNING filtering logger) and rendered
     as JSON to /dev/null
  b  sequential GETs over one keep-alive connection to a loopback upstream in another process
  c  16 threads sharing one session against one loopback host
  d  memory: RSS growth per call, and per new host (distinct hostnames, no network)

``--profile`` runs case (a) under cProfile and times the pieces of the hot path one by one.

Usage: python benchmarks/overhead.py [--quick] [--cases abcd] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import logging
import os
import platform
import pstats
import sys
import threading
import time
import timeit
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import requests
import structlog
from _common import canned_transport, median, pair_stats, rss_bytes, table, verdict
from _upstream import Upstream

import resilient_session
from resilient_session import ResilientAdapter, ResilientSession

URL = "http://api.bench.test/v1/items?id=42"


@dataclass(frozen=True)
class Plan:
    """How long each case runs; ``--quick`` trades precision for a ~30 s run."""

    rounds: int
    block: int
    loopback_block: int
    thread_calls: int
    memory_calls: int
    memory_hosts: int
    profile_calls: int


FULL = Plan(
    rounds=21,
    block=2_000,
    loopback_block=1_500,
    thread_calls=400,
    memory_calls=100_000,
    memory_hosts=20_000,
    profile_calls=20_000,
)
QUICK = Plan(
    rounds=7,
    block=800,
    loopback_block=500,
    thread_calls=120,
    memory_calls=30_000,
    memory_hosts=12_000,
    profile_calls=5_000,
)
THREADS = 16

# The contract's targets (issue #5).
ADDED_US_JSON = 25.0
ADDED_US_FILTERED = 10.0
RATIO_LOOPBACK = 1.05
RATIO_THREADS = 1.08
# "Flat": a leak of one small object per call (>= 16 bytes) would exceed this.
FLAT_BYTES_PER_CALL = 4.0


@contextmanager
def events(mode: str) -> Iterator[None]:
    """Configure structlog as an application would: off, filtered at WARNING, or JSON lines."""
    structlog.reset_defaults()
    with open(os.devnull, "w", encoding="utf-8") as sink:
        if mode == "filtered":
            resilient_session.log_json_lines(sink, level=logging.WARNING)
        elif mode == "json":
            resilient_session.log_json_lines(sink)
        try:
            yield
        finally:
            structlog.reset_defaults()


def _time_block(call: Callable[[], object], n: int) -> float:
    """Microseconds per call over *n* calls."""
    started = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - started) / n * 1e6


def interleaved(
    plain: Callable[[], float], resilient: Callable[[], float], rounds: int
) -> tuple[list[float], list[float]]:
    """Run *rounds* pairs, alternating which side goes first so neither always runs warm."""
    plain_samples: list[float] = []
    resilient_samples: list[float] = []
    for round_number in range(rounds):
        gc.collect()
        if round_number % 2 == 0:
            plain_samples.append(plain())
            resilient_samples.append(resilient())
        else:
            resilient_samples.append(resilient())
            plain_samples.append(plain())
    return plain_samples, resilient_samples


@dataclass(frozen=True)
class Row:
    case: str
    unit: str
    plain: float
    resilient: float
    added: float
    ratio: float
    target: str
    holds: bool

    def cells(self) -> list[object]:
        return [
            self.case,
            f"{self.plain:.1f} {self.unit}",
            f"{self.resilient:.1f} {self.unit}",
            f"{self.added:+.1f} {self.unit}",
            f"{self.ratio:.3f}",
            self.target,
            verdict(self.holds),
        ]


def _row(
    case: str, unit: str, samples: tuple[list[float], list[float]], target: str, holds: bool
) -> Row:
    plain, resilient = samples
    added, ratio = pair_stats(plain, resilient)
    return Row(case, unit, median(plain), median(resilient), added, ratio, target, holds)


def case_no_network(plan: Plan) -> list[Row]:
    rows = []
    with canned_transport():
        for mode, label, limit in (
            ("off", "a. no network, events off (structlog unconfigured)", ADDED_US_FILTERED),
            ("filtered", "a. no network, events filtered (WARNING)", ADDED_US_FILTERED),
            ("json", "a. no network, JSON event per try to /dev/null", ADDED_US_JSON),
        ):
            with events(mode), requests.Session() as plain, ResilientSession() as resilient:
                for session in (plain, resilient):
                    _time_block(lambda s=session: s.get(URL), plan.block // 4)  # type: ignore[misc]
                samples = interleaved(
                    lambda: _time_block(lambda: plain.get(URL), plan.block),
                    lambda: _time_block(lambda: resilient.get(URL), plan.block),
                    plan.rounds,
                )
            added, _ = pair_stats(*samples)
            rows.append(_row(label, "µs", samples, f"added <= {limit:.0f} µs", added <= limit))
    return rows


def case_loopback(plan: Plan, upstream: Upstream) -> Row:
    url = upstream.url(0, "/v1/items?id=42")
    with requests.Session() as plain, ResilientSession() as resilient:
        for session in (plain, resilient):
            _time_block(lambda s=session: s.get(url), plan.loopback_block // 4)  # type: ignore[misc]
        samples = interleaved(
            lambda: _time_block(lambda: plain.get(url), plan.loopback_block),
            lambda: _time_block(lambda: resilient.get(url), plan.loopback_block),
            plan.rounds,
        )
    _, ratio = pair_stats(*samples)
    return _row(
        "b. loopback, one keep-alive connection",
        "µs",
        samples,
        f"ratio <= {RATIO_LOOPBACK}",
        ratio <= RATIO_LOOPBACK,
    )


def _threaded_block(session: requests.Session, url: str, calls: int) -> float:
    """Microseconds of wall time per call, *THREADS* threads sharing *session*."""
    barrier = threading.Barrier(THREADS + 1)
    errors: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            for _ in range(calls):
                session.get(url)
        except Exception as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join(120)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} threads failed, first: {errors[0]!r}")
    return elapsed / (THREADS * calls) * 1e6


def case_threads(plan: Plan, upstream: Upstream) -> Row:
    url = upstream.url(0, "/v1/items?id=42")
    with requests.Session() as plain, ResilientSession() as resilient:
        # A connection per thread for both, so neither churns connections past its pool.
        plain.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=THREADS))
        resilient.mount(
            "http://", ResilientAdapter(registry=resilient.registry, pool_maxsize=THREADS)
        )
        for session in (plain, resilient):
            _threaded_block(session, url, plan.thread_calls // 4)
        samples = interleaved(
            lambda: _threaded_block(plain, url, plan.thread_calls),
            lambda: _threaded_block(resilient, url, plan.thread_calls),
            plan.rounds,
        )
    _, ratio = pair_stats(*samples)
    return _row(
        f"c. loopback, {THREADS} threads, one session",
        "µs",
        samples,
        f"ratio <= {RATIO_THREADS}",
        ratio <= RATIO_THREADS,
    )


@dataclass(frozen=True)
class Growth:
    total: float
    first_half: float
    second_half: float


def _growth(step: Callable[[int], object], count: int, checkpoints: int = 10) -> Growth:
    """RSS bytes per step overall, over the first half and over the second half of *count*."""
    gc.collect()
    marks = [rss_bytes()]
    per_mark = count // checkpoints
    done = 0
    for _ in range(checkpoints):
        for i in range(done, done + per_mark):
            step(i)
        done += per_mark
        gc.collect()
        marks.append(rss_bytes())
    half = checkpoints // 2
    span = per_mark * half
    return Growth(
        total=(marks[-1] - marks[0]) / done,
        first_half=(marks[half] - marks[0]) / span,
        second_half=(marks[-1] - marks[half]) / (done - span),
    )


def case_memory(plan: Plan) -> tuple[list[list[object]], list[str], bool]:
    rows: list[list[object]] = []
    notes = []
    holds = True
    with canned_transport():
        for name, factory in (("plain", requests.Session), ("resilient", ResilientSession)):
            session = factory()
            session.get(URL)
            growth = _growth(lambda _i, s=session: s.get(URL), plan.memory_calls)  # type: ignore[misc]
            flat = growth.second_half <= FLAT_BYTES_PER_CALL
            holds &= flat or name == "plain"
            rows.append(
                [
                    f"d. per call, {name} ({plan.memory_calls:,} calls)",
                    f"{growth.first_half:.2f} B",
                    f"{growth.second_half:.2f} B",
                    f"{growth.total:.2f} B",
                    f"flat (<= {FLAT_BYTES_PER_CALL:.0f} B/call late)" if name != "plain" else "",
                    verdict(flat) if name != "plain" else "",
                ]
            )
            session.close()
        for name, factory in (("plain", requests.Session), ("resilient", ResilientSession)):
            session = factory()
            growth = _growth(
                lambda i, s=session: s.get(f"http://h{i}.bench.test/v1/items"),  # type: ignore[misc]
                plan.memory_hosts,
            )
            cells = [f"d. per new host, {name} ({plan.memory_hosts:,} hosts)"]
            cells += [f"{growth.first_half:.0f} B", f"{growth.second_half:.0f} B"]
            cells.append(f"{growth.total:.0f} B")
            if isinstance(session, ResilientSession):
                kept = len(session.registry)
                cap = session.config.registry.max_hosts
                # Past the cap each new host evicts one: the second half must stay flat.
                bounded = kept <= cap and (
                    plan.memory_hosts < 2 * cap or growth.second_half <= growth.first_half / 10
                )
                holds &= bounded
                cells += [f"bounded at max_hosts={cap:,}", verdict(bounded)]
                notes.append(f"registry held {kept:,} hosts after {plan.memory_hosts:,}")
            else:
                cells += ["", ""]
            rows.append(cells)
            session.close()
    return rows, notes, holds


# --- profile -----------------------------------------------------------------------------------


def _is_ours(filename: str) -> bool:
    return f"{os.sep}resilient_session{os.sep}" in filename


def profile_hot_path(plan: Plan) -> None:
    """cProfile over case (a), then each piece of the per-try work timed on its own."""
    calls = plan.profile_calls
    for mode in ("json", "off"):
        with canned_transport(), events(mode), ResilientSession() as session:
            for _ in range(500):
                session.get(URL)
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(calls):
                session.get(URL)
            profiler.disable()
        stats = pstats.Stats(profiler, stream=io.StringIO())
        raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
        raw = stats.stats  # type: ignore[attr-defined]
        rows = []
        for (filename, line, function), (_, ncalls, tottime, cumtime, _) in raw.items():
            if _is_ours(filename):
                where = f"{filename.rsplit(os.sep, 1)[-1]}:{line} {function}"
                rows.append((tottime, cumtime, ncalls, where))
        rows.sort(reverse=True)
        print(f"\n### cProfile, events {mode}: {calls:,} calls, resilient_session frames")
        print("(µs per call under the profiler, which inflates small functions)\n")
        print(
            table(
                ["function", "own µs/call", "cumulative µs/call", "calls/call"],
                [
                    [
                        where,
                        f"{tot / calls * 1e6:.2f}",
                        f"{cum / calls * 1e6:.2f}",
                        f"{n / calls:g}",
                    ]
                    for tot, cum, n, where in rows[:18]
                ],
            )
        )
        outside = []
        for (filename, line, function), (_, ncalls, tottime, _cum, _) in raw.items():
            if "structlog" in filename:
                where = f"structlog/{filename.rsplit(os.sep, 1)[-1]}:{line} {function}"
                outside.append((tottime, ncalls, where))
        outside.sort(reverse=True)
        if mode == "json":
            total = sum(tot for tot, _, _ in outside) / calls * 1e6
            print(f"\nstructlog frames, own time: {total:.1f} µs per call in all; the largest:\n")
            print(
                table(
                    ["function", "own µs/call", "calls/call"],
                    [[w, f"{t / calls * 1e6:.2f}", f"{n / calls:g}"] for t, n, w in outside[:8]],
                )
            )
    _component_timings()


def _component_timings() -> None:
    """Each piece of one try's work, timed alone (no profiler in the way)."""
    from resilient_session.adapter import start_call
    from resilient_session.attempt import Attempt, Decision, Outcome, Reason, Verdict
    from resilient_session.events import log, try_fields
    from resilient_session.hosts import host_key
    from resilient_session.redact import SENSITIVE_PARAMS, redact_url

    session = ResilientSession()
    request = requests.Request("GET", URL).prepare()
    registry = session.registry
    clock = resilient_session.SYSTEM_CLOCK
    call = start_call(request, registry=registry, clock=clock)
    attempt = Attempt.first(call)
    outcome = Outcome(response=requests.Response()).with_decision(
        Decision(Verdict.SUCCESS, Reason.OK)
    )
    breaker = call.state.breaker
    fields = try_fields(attempt, outcome, clock.monotonic(), SENSITIVE_PARAMS)
    pieces: list[tuple[str, Callable[[], object]]] = [
        ("host_key(url) (urlsplit)", lambda: host_key(URL)),
        ("registry.for_url(url)", lambda: registry.for_url(URL)),
        ("start_call(...) (whole)", lambda: start_call(request, registry=registry, clock=clock)),
        ("Attempt.first(call)", lambda: Attempt.first(call)),
        ("breaker.allow() + record()", lambda: breaker.record(breaker.allow()[0], _success())),  # type: ignore[arg-type]
        ("bucket.deposit()", call.state.bucket.deposit),
        ("outcome.with_decision(...)", lambda: outcome.with_decision(outcome.decision)),
        ("structlog.is_configured()", structlog.is_configured),
        ("redact_url(url)", lambda: redact_url(URL, SENSITIVE_PARAMS)),
        (
            "try_fields(...) (incl. redact_url)",
            lambda: try_fields(attempt, outcome, clock.monotonic(), SENSITIVE_PARAMS),
        ),
    ]
    rows = [[name, f"{_per_call_us(fn):.2f}"] for name, fn in pieces]
    with open(os.devnull, "w", encoding="utf-8") as sink:
        for mode, level in (("json", logging.INFO), ("filtered", logging.WARNING)):
            resilient_session.log_json_lines(sink, level=level)
            rows.append(
                [
                    f"log.info('http.try', **fields), {mode}",
                    f"{_per_call_us(lambda: log.info('http.try', **fields)):.2f}",
                ]
            )
            bound = structlog.get_logger("bench").bind()
            rows.append(
                [
                    f"same on an already bound logger, {mode}",
                    f"{_per_call_us(lambda b=bound: b.info('http.try', **fields)):.2f}",
                ]
            )
        structlog.reset_defaults()
    print("\n### pieces of one try, timed alone (timeit, best of 5)\n")
    print(table(["piece", "µs per call"], rows))


def _success() -> Any:
    from resilient_session.breaker import TryResult

    return TryResult.SUCCESS


def _per_call_us(fn: Callable[[], object], number: int = 20_000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


# --- main --------------------------------------------------------------------------------------


def describe_machine() -> str:
    peers = ", ".join(
        f"{name} {version(name)}" for name in ("requests", "urllib3", "structlog", "msgspec")
    )
    return (
        f"{os.cpu_count()} cores, Python {platform.python_version()} "
        f"({platform.python_implementation()}), {peers}, "
        f"resilient-session {version('resilient-session')}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~30 s run, fewer rounds")
    parser.add_argument("--cases", default="abcd", help="which cases to run (default abcd)")
    parser.add_argument("--profile", action="store_true", help="profile case (a) afterwards")
    parser.add_argument("--rounds", type=int, help="pairs per case (default 21, quick 7)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = Plan(**{**plan.__dict__, "rounds": args.rounds})
    started = time.perf_counter()
    print(f"overhead: {describe_machine()}")
    print(
        f"overhead: {plan.rounds} interleaved pairs per case ({'quick' if args.quick else 'full'})"
    )

    rows: list[Row] = []
    if "a" in args.cases:
        rows += case_no_network(plan)
    if "b" in args.cases or "c" in args.cases:
        with Upstream(stacks=1) as upstream:
            if "b" in args.cases:
                rows.append(case_loopback(plan, upstream))
            if "c" in args.cases:
                rows.append(case_threads(plan, upstream))
    ok = all(row.holds for row in rows)
    if rows:
        print()
        print(
            table(
                ["case", "plain", "resilient", "added (median pair)", "ratio", "target", ""],
                [row.cells() for row in rows],
            )
        )
    if "d" in args.cases:
        memory_rows, notes, holds = case_memory(plan)
        ok &= holds
        print()
        print(
            table(
                ["memory, RSS growth", "first half", "second half", "overall", "target", ""],
                memory_rows,
            )
        )
        for note in notes:
            print(f"  {note}")
    if args.profile:
        profile_hot_path(plan)
    print(
        f"\noverhead: {'all targets hold' if ok else 'some targets MISSED'}"
        f" ({time.perf_counter() - started:.0f} s)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
