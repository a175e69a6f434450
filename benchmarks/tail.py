"""Tail latency: what hedging does for a host whose tries are now and then slow, and what it
costs a host that is slow on every try.

A loopback upstream (its own process, benchmarks/_upstream.py) serves each stack on a port of
its own; each stack runs in a process of its own and calls it from 8 worker threads in an open
loop (calls issued at fixed instants, so a stalled stack cannot lower the load it is offered;
latency runs from the instant a call is issued). Stacks, side by side in each run:

  requests            plain requests.Session
  urllib3 Retry       HTTPAdapter(max_retries=Retry(total=3, backoff_factor=0.5,
                      status_forcelist=[500, 502, 503, 504]))
  hedging off         ResilientSession() with its default config
  hedging auto        hedging: {enabled: true, delay: auto}
  hedging 50 ms       hedging: {enabled: true, delay: 0.05}

Runs:

  tail   3 % of tries, drawn at random, answered after 1 s, the rest after 5 ms
  slow   every try answered after 300 ms; the ResilientSession stacks with the budget
         {ratio: 0.2, min_per_second: 0, max_tokens: 1}, so hedges stop where its tokens do
  posts  50 POSTs without Idempotency-Key, each slower than a 50 ms hedging delay, from one
         ResilientSession: the upstream must see exactly 50
  callers  the tail's upstream, called by 16 and then by 64 callers at once, each calling again
         as soon as its call returns (a closed loop, as threads sharing one session do), the
         stacks side by side: requests, hedging off, hedging auto (with the delay it settled
         on), and "no slow tries": hedging off against an upstream without slow tries, which
         is what a free and perfect hedge would give (the p50 auto is held to; see
         docs/methods/tail.md on why not hedging off's)

Every try of every stack has the timeout (1 s connect, 5 s read).

Usage: python benchmarks/tail.py [--quick] [--only tail|slow|posts|callers] [--seed N]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import signal
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import requests
from _common import table, verdict
from _lanes import TIMEOUT, CallRecord, Lanes, PlainStack, Run, Stack
from _upstream import CALL_ID_HEADER, Hit, Phase, Upstream
from urllib3.util import Retry

from resilient_session import ResilientAdapter, ResilientSession

STACKS = ("requests", "urllib3 Retry", "hedging off", "hedging auto", "hedging 50 ms")
RUNS = ("tail", "slow", "posts", "callers")
WORKERS = 8
# The callers run: the stacks side by side, and how many callers share each one's session.
NO_SLOW = "no slow tries"
CALLER_STACKS = ("requests", "hedging off", "hedging auto", NO_SLOW)
CALLERS = (16, 64)  # the title of the run's table names them
SHOWN = "shown"  # a row that informs and is no target
# The slow run's budget: no refill and one token, so hedges are exactly what ratio allows.
TIGHT_BUDGET = {"ratio": 0.2, "min_per_second": 0.0, "max_tokens": 1}
HEDGING = {"hedging auto": {"enabled": True}, "hedging 50 ms": {"enabled": True, "delay": 0.05}}


@dataclass(frozen=True)
class Plan:
    """Rates and durations; ``--quick`` shortens every run."""

    tail_rate: float  # calls per second per stack
    tail_seconds: float
    slow_rate: float
    slow_seconds: float
    callers_seconds: float  # each of the callers run's rounds, one per entry of CALLERS
    warmup: float  # seconds of calls left out of the measures: pools fill, auto learns
    drain: float


FULL = Plan(
    tail_rate=100,
    tail_seconds=70,
    slow_rate=16,
    slow_seconds=45,
    callers_seconds=30,
    warmup=5,
    drain=8,
)
QUICK = Plan(
    tail_rate=100,
    tail_seconds=20,
    slow_rate=16,
    slow_seconds=15,
    callers_seconds=12,
    warmup=3,
    drain=6,
)


class ResilientStack(Stack):
    def __init__(self, pool: int, config: dict[str, Any]) -> None:
        self.session = ResilientSession(config)
        # A hedged call may hold two connections: the pool keeps both.
        self.session.mount(
            "http://", ResilientAdapter(registry=self.session.registry, pool_maxsize=2 * pool)
        )

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        return self.session.get(url, headers=headers, timeout=TIMEOUT)

    def state(self) -> str | None:
        # What the lane samples every 50 ms: the delay a hedge waits now (0 when off, or
        # while auto has seen too few tries), so the table can show where auto settled.
        delays = [health.hedge_delay for health in self.session.health().values()]
        return repr(delays[0]) if delays else None


def _build(name: str, pool: int, budget: dict[str, float] | None) -> Stack:
    if name == "requests":
        return PlainStack(pool)
    if name == "urllib3 Retry":
        return PlainStack(
            pool, Retry(total=3, backoff_factor=0.5, status_forcelist=[500, 502, 503, 504])
        )
    defaults: dict[str, Any] = {}
    if name in HEDGING:
        defaults["hedging"] = HEDGING[name]
    if budget is not None:
        defaults["budget"] = budget
    return ResilientStack(pool, {"defaults": defaults})


def build_tail_stack(name: str, pool: int) -> Stack:
    """A stack of the tail run: every ResilientSession with its default budget."""
    return _build(name, pool, None)


def build_slow_stack(name: str, pool: int) -> Stack:
    """A stack of the slow run: the ResilientSession stacks on the tight budget."""
    return _build(name, pool, TIGHT_BUDGET)


def hedged_session() -> ResilientSession:
    """A session hedging every host on ``auto``: a factory for the instruction counters
    (``instr_meter.py --factory tail:hedged_session``, ``PYTHONPATH=benchmarks``)."""
    return ResilientSession({"defaults": {"hedging": HEDGING["hedging auto"]}})


# --- measures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measures:
    calls: int  # calls issued after the warm-up
    failed: int
    p50: float
    p99: float
    p999: float
    worst: float
    tries_per_call: float  # upstream tries those calls caused, per call


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def measure(calls: Sequence[CallRecord], hits: Sequence[Hit], warmup: float) -> Measures:
    kept = [record for record in calls if record.issued >= warmup]
    ids = {record.call_id for record in kept}
    tries = sum(1 for hit in hits if hit.call_id in ids)
    latencies = [record.done - record.issued for record in kept]
    count = len(kept) or 1
    return Measures(
        calls=len(kept),
        failed=sum(not record.ok for record in kept),
        p50=quantile(latencies, 0.5),
        p99=quantile(latencies, 0.99),
        p999=quantile(latencies, 0.999),
        worst=max(latencies, default=math.nan),
        tries_per_call=tries / count,
    )


def ms(value: float) -> str:
    if math.isinf(value):
        return "unfinished"
    if math.isnan(value):
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.3f} s"


# --- the runs ------------------------------------------------------------------------------------


def run_side_by_side(
    upstream: Upstream, phase: Phase, build: Any, rate: float, seconds: float, plan: Plan, seed: int
) -> dict[str, Measures]:
    """Every stack at once under *phase*, each in its own process on its own port."""
    urls = [upstream.url(index, "/v1/items") for index in range(len(STACKS))]
    with Lanes(urls, lifetime=seconds + plan.drain + 120, names=STACKS, build=build) as lanes:
        started = time.monotonic() + 1.0
        upstream.schedule(started, [[phase]] * len(STACKS), seed=seed)
        run = Run(started, 0, rate, int(rate * seconds), WORKERS, seconds, plan.drain)
        results = lanes.run(run, timeout=1.0 + seconds + plan.drain + 60)
        hits = upstream.collect()
    return {
        name: measure(result.calls, [hit for hit in hits if hit.stack == index], plan.warmup)
        for index, (name, result) in enumerate(zip(STACKS, results, strict=True))
    }


@dataclass(frozen=True)
class Settled:
    """The hedging delay a stack reported while its calls were measured, in seconds."""

    median: float
    low: float
    high: float


def settled(states: Sequence[tuple[float, str]], since: float, until: float) -> Settled | None:
    """The delay samples taken from *since* to *until* seconds into the run; None when the
    stack reports none (plain requests) or reported 0 throughout (hedging off)."""
    delays = sorted(float(state) for at, state in states if since <= at <= until)
    if not delays or delays[-1] == 0:
        return None
    return Settled(quantile(delays, 0.5), delays[0], delays[-1])


@dataclass(frozen=True)
class CallerRow:
    """One stack's figures in the callers run."""

    measures: Measures
    delay: Settled | None
    cpu_per_call: float  # CPU seconds the stack's process spent per call, all threads


def run_callers(upstream: Upstream, callers: int, plan: Plan, seed: int) -> dict[str, CallerRow]:
    """*callers* closed-loop callers on one session per stack, the stacks side by side, each in
    its own process on its own port; every port has the tail's upstream but NO_SLOW's."""
    names = CALLER_STACKS
    urls = [upstream.url(index, "/v1/items") for index in range(len(names))]
    seconds = plan.callers_seconds
    tail = Phase(0, 0.0, latency=0.005, slow=0.03, slow_latency=1.0)
    fast = Phase(0, 0.0, latency=0.005)
    phases = [[fast if name == NO_SLOW else tail] for name in names]
    with Lanes(
        urls, lifetime=seconds + plan.drain + 120, names=names, build=build_tail_stack
    ) as lanes:
        started = time.monotonic() + 1.0
        upstream.schedule(started, phases, seed=seed)
        run = Run(started, 0, 0.0, 0, callers, seconds, plan.drain)
        results = lanes.run(run, timeout=1.0 + seconds + plan.drain + 60)
        hits = upstream.collect()
    return {
        name: CallerRow(
            measure(result.calls, [hit for hit in hits if hit.stack == index], plan.warmup),
            settled(result.states, plan.warmup, seconds),
            result.cpu / max(1, len(result.calls)),
        )
        for index, (name, result) in enumerate(zip(names, results, strict=True))
    }


def run_posts(upstream: Upstream, seed: int) -> int:
    """50 POSTs without Idempotency-Key, each 300 ms against a 50 ms hedging delay, from 8
    threads; how many requests the upstream saw for them."""
    upstream.schedule(time.monotonic(), [[Phase(0, 0.0, latency=0.3)]], seed=seed)
    config = {"defaults": {"hedging": HEDGING["hedging 50 ms"]}}
    with ResilientSession(config) as session:

        def post(call_id: int) -> int:
            headers = {CALL_ID_HEADER: str(call_id)}
            return session.post(
                upstream.url(0, "/v1/orders"), data=b"{}", headers=headers, timeout=TIMEOUT
            ).status_code

        with ThreadPoolExecutor(WORKERS) as pool:
            statuses = list(pool.map(post, range(50)))
    assert statuses == [200] * 50, statuses
    return len(upstream.collect())


def results_table(measures: dict[str, Measures]) -> str:
    rows = [
        [
            name,
            m.calls,
            m.failed,
            ms(m.p50),
            ms(m.p99),
            ms(m.p999),
            ms(m.worst),
            f"{m.tries_per_call:.3f}",
        ]
        for name, m in measures.items()
    ]
    headers = ["stack", "calls", "failed", "p50", "p99", "p99.9", "max", "tries/call"]
    return table(headers, rows)


def callers_table(rounds: dict[int, dict[str, CallerRow]]) -> str:
    rows = [
        [
            callers,
            name,
            row.measures.calls,
            row.measures.failed,
            ms(row.measures.p50),
            ms(row.measures.p99),
            ms(row.measures.worst),
            f"{row.measures.tries_per_call:.3f}",
            f"{row.cpu_per_call * 1e6:.0f} µs",
            "-"
            if row.delay is None
            else f"{ms(row.delay.median)} ({ms(row.delay.low)}-{ms(row.delay.high)})",
        ]
        for callers, stacks in rounds.items()
        for name, row in stacks.items()
    ]
    headers = ["callers", "stack", "calls", "failed", "p50", "p99", "max", "tries/call"]
    return table([*headers, "CPU/call", "delay: median (range)"], rows)


def callers_verdicts(rounds: dict[int, dict[str, CallerRow]]) -> list[list[object]]:
    rows: list[list[object]] = []
    for callers, stacks in rounds.items():
        auto, off = stacks["hedging auto"].measures, stacks["hedging off"].measures
        no_slow = stacks[NO_SLOW].measures
        run = f"{callers} callers"
        rows += [
            [
                run,
                f"hedging auto: p99 <= 0.3 x hedging off's ({ms(off.p99)})",
                f"x{auto.p99 / off.p99:.3f}",
                verdict(auto.p99 <= 0.3 * off.p99),
            ],
            [
                run,
                f"hedging auto: p50 <= 1.1 x no slow tries' ({ms(no_slow.p50)}), the same load",
                f"x{auto.p50 / no_slow.p50:.3f}",
                verdict(auto.p50 <= 1.1 * no_slow.p50),
            ],
            [
                run,
                f"hedging auto: p50 against hedging off's ({ms(off.p50)}), a lighter load",
                f"x{auto.p50 / off.p50:.3f}",
                SHOWN,
            ],
        ]
    return rows


def verdicts(
    tail: dict[str, Measures] | None, slow: dict[str, Measures] | None, posts: int | None
) -> list[list[object]]:
    rows: list[list[object]] = []
    if tail is not None:
        auto, plain = tail["hedging auto"], tail["requests"]
        rows += [
            ["tail", "hedging auto: p99 <= 100 ms", ms(auto.p99), verdict(auto.p99 <= 0.1)],
            [
                "tail",
                f"hedging auto: p99 <= 0.2 x plain requests' ({ms(plain.p99)})",
                f"x{auto.p99 / plain.p99:.3f}",
                verdict(auto.p99 <= 0.2 * plain.p99),
            ],
            [
                "tail",
                "hedging auto: tries/call <= 1.08",
                f"{auto.tries_per_call:.3f}",
                verdict(auto.tries_per_call <= 1.08),
            ],
        ]
    if slow is not None:
        bound = 1 + TIGHT_BUDGET["ratio"] + 0.02
        for name in ("hedging 50 ms", "hedging auto"):
            m = slow[name]
            rows.append(
                [
                    "slow",
                    f"{name}: tries/call <= 1 + ratio + 0.02 = {bound:g}",
                    f"{m.tries_per_call:.3f}",
                    verdict(m.tries_per_call <= bound),
                ]
            )
    if posts is not None:
        rows.append(["posts", "50 POSTs reach the upstream 50 times", posts, verdict(posts == 50)])
    return rows


def describe_machine() -> str:
    peers = ", ".join(f"{name} {version(name)}" for name in ("requests", "urllib3"))
    return f"{os.cpu_count()} cores, Python {platform.python_version()}, {peers}"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a run of about a minute")
    parser.add_argument("--only", choices=RUNS, help="this run alone")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    plan = QUICK if args.quick else FULL
    runs = (args.only,) if args.only else RUNS
    began = time.monotonic()
    print(f"tail: {describe_machine()}; load average {os.getloadavg()[0]:.1f} before the run")
    print(
        f"tail: {WORKERS} workers per stack, open loop; tail {plan.tail_rate:g} calls/s for "
        f"{plan.tail_seconds:g} s, slow {plan.slow_rate:g} calls/s for {plan.slow_seconds:g} s; "
        f"callers: closed loop, {plan.callers_seconds:g} s each; the first {plan.warmup:g} s "
        f"left out; timeout {TIMEOUT}"
    )
    tail = slow = None
    posts = None
    rounds: dict[int, dict[str, CallerRow]] = {}
    with Upstream(stacks=len(STACKS), lifetime=600) as upstream:
        if "tail" in runs:
            phase = Phase(0, 0.0, latency=0.005, slow=0.03, slow_latency=1.0)
            tail = run_side_by_side(
                upstream,
                phase,
                build_tail_stack,
                plan.tail_rate,
                plan.tail_seconds,
                plan,
                args.seed,
            )
            print(
                f"\n### tail: 3 % of tries 1 s, the rest 5 ms ({time.monotonic() - began:.0f} s)\n"
            )
            print(results_table(tail))
            print(f"\nupstream loop late by at most {ms(upstream.loop_lag)}")
        if "slow" in runs:
            phase = Phase(0, 0.0, latency=0.3)
            slow = run_side_by_side(
                upstream,
                phase,
                build_slow_stack,
                plan.slow_rate,
                plan.slow_seconds,
                plan,
                args.seed + 1,
            )
            elapsed = time.monotonic() - began
            print(f"\n### slow: every try 300 ms, budget {TIGHT_BUDGET} ({elapsed:.0f} s)\n")
            print(results_table(slow))
            print(f"\nupstream loop late by at most {ms(upstream.loop_lag)}")
        if "posts" in runs:
            posts = run_posts(upstream, args.seed + 2)
            print(f"\n### posts: 50 POSTs without Idempotency-Key: {posts} requests upstream")
        if "callers" in runs:
            for offset, callers in enumerate(CALLERS):
                rounds[callers] = run_callers(upstream, callers, plan, args.seed + 3 + offset)
                print(
                    f"callers: {callers} done; upstream loop late by at most "
                    f"{ms(upstream.loop_lag)}; load average {os.getloadavg()[0]:.1f}"
                )
            elapsed = time.monotonic() - began
            print(
                f"\n### callers: 3 % of tries 1 s, the rest 5 ms; 16 and 64 callers, closed "
                f"loop, {plan.callers_seconds:g} s each ({elapsed:.0f} s)\n"
            )
            print(callers_table(rounds))
    rows = verdicts(tail, slow, posts) + callers_verdicts(rounds)
    print("\n### targets (ResilientSession)\n")
    print(table(["run", "target", "result", ""], rows))
    ok = all(row[-1] in (verdict(True), SHOWN) for row in rows)
    said = "all targets hold" if ok else "some targets MISSED"
    print(f"tail: {said} ({time.monotonic() - began:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
