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
``--deadline S`` gives the resilient session of cases a-c a default deadline of S seconds, so
each try is bounded by the deadline stage and the watchdog; ``deadline_session`` is the same
session for ``instr_meter.py --factory overhead:deadline_session`` and for
``instr_loopback.py``, its loopback counterpart (``PYTHONPATH=benchmarks``).

Usage: python benchmarks/overhead.py [--quick] [--cases abcd] [--profile] [--deadline S]
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
    ablation_rounds: int


FULL = Plan(
    rounds=21,
    block=2_000,
    loopback_block=1_500,
    thread_calls=250,
    memory_calls=100_000,
    memory_hosts=20_000,
    profile_calls=20_000,
    ablation_rounds=200,
)
QUICK = Plan(
    rounds=7,
    block=800,
    loopback_block=500,
    thread_calls=120,
    memory_calls=30_000,
    memory_hosts=12_000,
    profile_calls=5_000,
    ablation_rounds=60,
)
THREADS = 16

# The contract's targets (issue #5).
ADDED_US_JSON = 25.0
ADDED_US_FILTERED = 10.0
RATIO_LOOPBACK = 1.05
RATIO_THREADS = 1.08
# "Flat": a leak of one small object per call (>= 16 bytes) would exceed this.
FLAT_BYTES_PER_CALL = 4.0


# The deadline.default of the resilient sessions of cases a-c; None: the shipped default, none.
DEADLINE: float | None = None


def _resilient() -> ResilientSession:
    if DEADLINE is None:
        return ResilientSession()
    return ResilientSession({"defaults": {"deadline": {"default": DEADLINE}}})


def deadline_session() -> ResilientSession:
    """A session whose every call has a deadline: a factory for the instruction counters."""
    return ResilientSession({"defaults": {"deadline": {"default": 30.0}}})


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
            with events(mode), requests.Session() as plain, _resilient() as resilient:
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


def case_loopback(plan: Plan, upstream: Upstream, timeout: tuple[float, float] | None) -> Row:
    url = upstream.url(0, "/v1/items?id=42")
    with requests.Session() as plain, _resilient() as resilient:
        for session in (plain, resilient):
            _time_block(lambda s=session: s.get(url, timeout=timeout), plan.loopback_block // 4)  # type: ignore[misc]
        samples = interleaved(
            lambda: _time_block(lambda: plain.get(url, timeout=timeout), plan.loopback_block),
            lambda: _time_block(lambda: resilient.get(url, timeout=timeout), plan.loopback_block),
            plan.rounds,
        )
    _, ratio = pair_stats(*samples)
    # Without a caller's timeout ResilientSession applies its default (5 s, 30 s): a socket
    # with a timeout waits in poll() before each read, which plain requests does not do.
    label = "b. loopback, one keep-alive connection"
    if timeout is not None:
        label += f", both timeout={timeout}"
    return _row(label, "µs", samples, f"ratio <= {RATIO_LOOPBACK}", ratio <= RATIO_LOOPBACK)


def _threaded_block(
    session: requests.Session, url: str, calls: int, timeout: tuple[float, float] | None
) -> float:
    """Microseconds of wall time per call, *THREADS* threads sharing *session*."""
    barrier = threading.Barrier(THREADS + 1)
    errors: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            for _ in range(calls):
                session.get(url, timeout=timeout)
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


def case_threads(plan: Plan, upstream: Upstream, timeout: tuple[float, float] | None) -> Row:
    url = upstream.url(0, "/v1/items?id=42")
    with requests.Session() as plain, _resilient() as resilient:
        # A connection per thread for both, so neither churns connections past its pool.
        plain.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=THREADS))
        resilient.mount(
            "http://", ResilientAdapter(registry=resilient.registry, pool_maxsize=THREADS)
        )
        for session in (plain, resilient):
            _threaded_block(session, url, plan.thread_calls // 4, timeout)
        samples = interleaved(
            lambda: _threaded_block(plain, url, plan.thread_calls, timeout),
            lambda: _threaded_block(resilient, url, plan.thread_calls, timeout),
            plan.rounds,
        )
    _, ratio = pair_stats(*samples)
    label = f"c. loopback, {THREADS} threads, one session"
    if timeout is not None:
        label += f", both timeout={timeout}"
    return _row(label, "µs", samples, f"ratio <= {RATIO_THREADS}", ratio <= RATIO_THREADS)


def _rss_marks(step: Callable[[int], object], count: int, every: int) -> list[tuple[int, int]]:
    """``(steps done, RSS bytes)`` before the first step and after every *every* steps."""
    gc.collect()
    marks = [(0, rss_bytes())]
    for start in range(0, count, every):
        for i in range(start, min(count, start + every)):
            step(i)
        gc.collect()
        marks.append((min(count, start + every), rss_bytes()))
    return marks


def _slope(marks: list[tuple[int, int]], start: int, stop: int) -> float:
    """RSS bytes per step between the marks at *start* and *stop* steps."""
    at = dict(marks)
    return (at[stop] - at[start]) / (stop - start)


def case_memory(plan: Plan) -> tuple[list[list[object]], list[str], bool]:
    rows: list[list[object]] = []
    notes = []
    holds = True
    calls = plan.memory_calls
    hosts = plan.memory_hosts
    cap = resilient_session.Config().registry.max_hosts
    with canned_transport():
        for name, factory in (("plain", requests.Session), ("resilient", ResilientSession)):
            with factory() as session:
                session.get(URL)
                marks = _rss_marks(lambda _i, s=session: s.get(URL), calls, calls // 10)  # type: ignore[misc]
            late = _slope(marks, calls // 2, calls)
            flat = late <= FLAT_BYTES_PER_CALL
            mine = name == "resilient"
            holds &= flat or not mine
            rows.append(
                [
                    f"d. per call, {name}",
                    f"{calls:,} calls",
                    f"{_slope(marks, 0, calls // 2):.2f} B/call",
                    f"{late:.2f} B/call",
                    f"flat: <= {FLAT_BYTES_PER_CALL:.0f} B/call late" if mine else "",
                    verdict(flat) if mine else "",
                ]
            )
        for name, factory in (("plain", requests.Session), ("resilient", ResilientSession)):
            with factory() as session:
                marks = _rss_marks(
                    lambda i, s=session: s.get(f"http://h{i}.bench.test/v1/items"),  # type: ignore[misc]
                    hosts,
                    1_000,
                )
                kept = len(session.registry) if isinstance(session, ResilientSession) else 0
            up_to_cap = _slope(marks, 0, min(cap, hosts))
            past_cap = _slope(marks, cap, hosts) if hosts > cap else 0.0
            mine = name == "resilient"
            # Past the cap each new host evicts the oldest, so RSS must level off; a tenth of
            # the growth up to the cap leaves room for the dict's periodic rebuilds.
            bounded = hosts > cap and kept <= cap
            bounded &= past_cap * (hosts - cap) <= 0.1 * up_to_cap * cap
            holds &= bounded or not mine
            rows.append(
                [
                    f"d. per new host, {name}",
                    f"{hosts:,} hosts",
                    f"{up_to_cap:.0f} B/host",
                    f"{past_cap:.0f} B/host",
                    f"bounded at max_hosts={cap:,}" if mine else "",
                    verdict(bounded) if mine else "",
                ]
            )
            if mine:
                notes.append(f"the registry held {kept:,} hosts after {hosts:,} distinct hosts")
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
    with canned_transport():
        _component_timings(plan.ablation_rounds)


_FIELDS = {
    "method": "GET",
    "url": URL,
    "host": "http://api.bench.test:80",
    "attempt": 1,
    "status": 200,
    "error": None,
    "wait": 0.0,
    "total": 0.000123,
    "decision": "success",
    "reason": "ok",
    "breaker": "closed",
}


def _pieces() -> list[tuple[str, Callable[[], Callable[[], object]]]]:
    """Named setups, each returning the callable to time. They reach into internals, which
    move as the library changes: a setup that no longer fits is reported, not fatal."""
    from requests.adapters import HTTPAdapter

    import resilient_session._observe.redact as redact_module
    import resilient_session._state.registry as hosts_module

    session = ResilientSession()
    request = requests.Request("GET", URL).prepare()
    state = session.registry.for_url(URL)
    names = redact_module.SENSITIVE_PARAMS

    def start_call() -> Callable[[], object]:
        from resilient_session._pipeline.call import start_call as start
        from resilient_session._transport.requests_wire import REQUESTS_WIRE

        return lambda: start(request, session.registry, REQUESTS_WIRE)

    def breaker_round_trip() -> Callable[[], object]:
        from resilient_session._state.breaker import TryResult

        breaker = state.breaker
        return lambda: breaker.record(breaker.allow()[0], TryResult.SUCCESS)  # type: ignore[arg-type]

    plain = HTTPAdapter()
    mine = session.get_adapter(URL)
    return [
        ("HTTPAdapter.send (canned), for scale", lambda: lambda: plain.send(request)),
        ("ResilientAdapter.send (canned), whole pipeline", lambda: lambda: mine.send(request)),
        ("host_key(url)", lambda: lambda: hosts_module.host_key(URL)),
        ("registry.for_url(url)", lambda: lambda: session.registry.for_url(URL)),
        ("start_call(...)", start_call),
        ("breaker.allow() + breaker.record()", breaker_round_trip),
        ("bucket.deposit()", lambda: state.bucket.deposit),
        ("redact_url(url)", lambda: lambda: redact_module.redact_url(URL, names)),
    ]


def _component_timings(ablation_rounds: int) -> None:
    """Each piece of one try's work, timed alone (no profiler in the way)."""
    rows = []
    for name, setup in _pieces():
        try:
            fn = setup()
            rows.append([name, f"{_per_call_us(fn):.2f}"])
        except (ImportError, AttributeError, TypeError) as exc:
            rows.append([name, f"n/a ({type(exc).__name__}: the internals moved)"])
    proxy = structlog.get_logger("bench")
    with open(os.devnull, "w", encoding="utf-8") as sink:
        for mode, level in (("JSON", logging.INFO), ("filtered", logging.WARNING)):
            resilient_session.log_json_lines(sink, level=level)
            bound = proxy.bind()
            loggers: tuple[tuple[str, Any], ...] = (("lazy proxy", proxy), ("bound logger", bound))
            for label, logger in loggers:
                cost = _per_call_us(_emit(logger))
                rows.append([f"structlog {label}.info(11 fields), {mode}", f"{cost:.2f}"])
        structlog.reset_defaults()
    print("\n### pieces of one try, timed alone (timeit, best of 5)\n")
    print("Alone, each runs with warm caches; inside a whole call the same code costs more.\n")
    print(table(["piece", "µs per call"], rows))
    _stage_ablation(ablation_rounds)


def _emit(logger: Any) -> Callable[[], object]:
    # Looked up on every call, as the library does: a lazy proxy binds on each attribute access.
    return lambda: logger.info("http.try", **_FIELDS)


def _stage_ablation(rounds: int, calls: int = 200) -> None:
    """What each stage adds inside a whole ``session.get`` (canned transport, events off).

    Alone, a piece runs with warm caches and costs about half of what it costs between
    requests' own work, so this is measured in place: *rounds* short blocks of *calls*,
    plain and resilient alternating, the median of their differences.
    """
    try:
        from resilient_session._pipeline.drive import compose
        from resilient_session._pipeline.stages import standard_stages

        session = ResilientSession()
        adapter: Any = session.get_adapter(URL)
        stages = standard_stages()
        transport = adapter._transport
    except (ImportError, AttributeError, TypeError) as exc:
        print(f"\n(stage ablation skipped: {type(exc).__name__}: {exc})")
        return
    plain = requests.Session()
    full = adapter._chain
    chains = [("all stages", full)]
    for index, stage in enumerate(stages):
        name = getattr(stage, "__name__", type(stage).__name__)
        chains.append(
            (f"without {name}", compose([s for i, s in enumerate(stages) if i != index], transport))
        )
    chains.append(("no stages (session, start_call, drive, transport)", compose([], transport)))
    rows = []
    for label, chain in chains:
        adapter._chain = chain
        added = _in_place_added_us(plain, session, rounds, calls)
        rows.append([label, f"{added:+.2f}"])
    adapter._chain = full
    print("\n### inside session.get, stages left out: µs added over requests.Session\n")
    print(table(["chain", "added µs (median of short pairs)"], rows))


def _in_place_added_us(
    plain: requests.Session, resilient: requests.Session, rounds: int, calls: int
) -> float:
    for session in (plain, resilient):
        _time_block(lambda s=session: s.get(URL), calls)  # type: ignore[misc]
    differences = []
    for round_number in range(rounds):
        pair = [
            lambda: _time_block(lambda: plain.get(URL), calls),
            lambda: _time_block(lambda: resilient.get(URL), calls),
        ]
        if round_number % 2:
            pair.reverse()
        first, second = (run() for run in pair)
        plain_us, resilient_us = (first, second) if round_number % 2 == 0 else (second, first)
        differences.append(resilient_us - plain_us)
    return median(differences)


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
    parser.add_argument(
        "--deadline", type=float, help="deadline.default (s) of the resilient session, cases a-c"
    )
    args = parser.parse_args(argv)
    global DEADLINE
    DEADLINE = args.deadline
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = Plan(**{**plan.__dict__, "rounds": args.rounds})
    started = time.perf_counter()
    print(f"overhead: {describe_machine()}")
    print(
        f"overhead: {plan.rounds} interleaved pairs per case ({'quick' if args.quick else 'full'})"
        + (f", resilient calls with deadline={DEADLINE} s" if DEADLINE is not None else "")
    )

    rows: list[Row] = []
    if "a" in args.cases:
        rows += case_no_network(plan)
    if "b" in args.cases or "c" in args.cases:
        with Upstream(stacks=1) as upstream:
            if "b" in args.cases:
                rows.append(case_loopback(plan, upstream, None))
                rows.append(case_loopback(plan, upstream, (5.0, 30.0)))
            if "c" in args.cases:
                rows.append(case_threads(plan, upstream, None))
                rows.append(case_threads(plan, upstream, (5.0, 30.0)))
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
                [
                    "memory (RSS growth)",
                    "run",
                    "first half / up to the cap",
                    "second half / past the cap",
                    "target",
                    "",
                ],
                memory_rows,
            )
        )
        for note in notes:
            print(f"  {note}")
    if args.profile:
        profile_hot_path(plan)
    measured = bool(rows) or "d" in args.cases
    summary = ("all targets hold" if ok else "some targets MISSED") if measured else "done"
    print(f"\noverhead: {summary} ({time.perf_counter() - started:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
