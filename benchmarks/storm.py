"""Retry storms: what five client stacks do to an upstream in every failure shape.

A loopback upstream (its own process) serves each stack on a port of its own, under one
schedule for all of them; each stack runs in a process of its own (benchmarks/_lanes.py lists
the stacks). Scenarios, each run with every stack side by side:

  outage     healthy, then 6 s of 503s (one run) or of connection resets (another), then
             healthy again; open loop at --rate calls/s per stack (320 by default)
  brownout   random 503s at p = 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, one run each, 100 calls/s
  hang       for 6 s the upstream reads requests and never answers them, then heals; open
             loop at --rate calls/s per stack
  healthy    every answer 200 ms late; closed loop, 64 callers per stack calling back to back

The brownout runs drive every stack at once. The outage, hang and healthy runs drive the
stacks one after another under the same schedule, each alone on the machine: five stacks at
320 calls/s each are more than a 2-core machine issues on time, and five closed loops of 64
callers at once leave each stack's throughput bound by its share of the cores, not by the
upstream's latency (--together runs them at once). The load table says, per run, whether the
machine kept up.

Open loop: a scheduler issues calls at fixed instants into a pool of worker threads, so a
stalled stack cannot lower the load it is offered; latency runs from the instant a call is
issued, queueing for a worker included. Every try of every stack has the timeout (1 s connect,
5 s read).

Usage: python benchmarks/storm.py [--quick] [--only SCENARIO] [--rate N] [--together]
                                  [--png PATH]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from _common import table, verdict
from _lanes import STACKS, TIMEOUT, CallRecord, Lanes, Run
from _storm_plot import Series, plot_brownout, plot_timeline
from _upstream import Hit, Phase, Upstream

from resilient_session import Config

SCENARIOS = ("outage", "brownout", "hang", "healthy")
SHARES = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
BIN = 0.1
HEALED_SHARE = 0.95
# Past these, the run measured the machine rather than the stacks: say so beside the tables.
ISSUE_LAG_LIMIT = 0.1
LOOP_LAG_LIMIT = 0.1


@dataclass(frozen=True)
class Plan:
    """Rates and durations; ``--quick`` keeps the whole run to a few minutes."""

    rate: float  # outage and hang: calls per second offered to each stack
    brownout_rate: float
    workers: int  # open loop: worker threads per stack
    warmup: float  # healthy seconds before the fault
    outage: float  # the outage and the hang
    recovery: float  # healthy seconds after the outage
    brownout: float
    healthy: float
    callers: int  # healthy: calls in flight per stack
    latency: float  # healthy: seconds before each answer
    drain: float  # longest wait for calls still running after the last is issued
    # Scenarios whose stacks run one after another, each alone on the machine: five stacks at
    # 320 calls/s each are more than two cores issue on time, and five closed loops of 64
    # callers at once measure the cores rather than the stacks.
    in_turn: tuple[str, ...] = ("outage", "hang", "healthy")


FULL = Plan(
    rate=320,
    brownout_rate=100,
    workers=256,
    warmup=4,
    outage=6,
    recovery=12,
    brownout=20,
    healthy=10,
    callers=64,
    latency=0.2,
    drain=12,
)
QUICK = Plan(
    rate=320,
    brownout_rate=100,
    workers=256,
    warmup=2,
    outage=6,
    recovery=8,
    brownout=6,
    healthy=5,
    callers=64,
    latency=0.2,
    drain=6,
)


@dataclass(frozen=True)
class Variant:
    """One fault pattern, run against every stack at once."""

    scenario: str
    name: str
    phases: tuple[Phase, ...]
    fault: tuple[float, float]  # seconds after the start: the window the measures look at
    heal: float | None  # seconds after the start at which the upstream is healthy again
    rate: float  # calls per second per stack; 0 for the closed loop
    duration: float  # seconds during which calls are made
    share: float = 1.0  # the share of requests that fail during the fault


def variants(scenario: str, plan: Plan) -> list[Variant]:
    start = plan.warmup
    if scenario == "outage" or scenario == "hang":
        end = start + plan.outage
        kinds = (("hang", False),) if scenario == "hang" else (("503", False), ("resets", True))
        return [
            Variant(
                scenario,
                "hang" if kind == "hang" else f"outage, {kind}",
                (
                    Phase(0, 0.0),
                    Phase(start, 1.0, reset=reset, hang=kind == "hang"),
                    Phase(end, 0.0),
                ),
                (start, end),
                end,
                plan.rate,
                end + plan.recovery,
            )
            for kind, reset in kinds
        ]
    if scenario == "brownout":
        end = start + plan.brownout
        return [
            Variant(
                scenario,
                f"brownout {share:.0%}",
                (Phase(0, 0.0), Phase(start, share)),
                (start, end),
                None,
                plan.brownout_rate,
                end,
                share,
            )
            for share in SHARES
        ]
    return [
        Variant(
            scenario,
            "healthy",
            (Phase(0, 0.0, latency=plan.latency),),
            (0.0, plan.healthy),
            None,
            0.0,
            plan.healthy,
            0.0,
        )
    ]


# --- running a variant ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Lane:
    """What one stack did under one variant: its calls, the tries the upstream saw for it and
    its breaker's states."""

    variant: Variant
    stack_name: str
    started: float  # time.monotonic() of the variant's start; hits share that clock
    calls: list[CallRecord]
    hits: list[Hit]
    states: list[tuple[float, str]]
    issue_lag: tuple[float, float]  # the scheduler's lateness issuing calls: p99 and worst
    cpu: float  # CPU seconds the stack's process spent


def run_variant(
    upstream: Upstream, lanes: Lanes, variant: Variant, plan: Plan, number: int, seed: int
) -> tuple[list[Lane], float]:
    """Every stack under *variant*, at once or in turn; the lanes and the upstream's worst
    loop lag."""
    if variant.rate > 0:
        workers, calls = plan.workers, int(variant.duration * variant.rate)
    else:
        workers, calls = plan.callers, 0
    turns: list[int | None] = (
        list(range(len(STACKS))) if variant.scenario in plan.in_turn else [None]
    )
    ran: list[Lane] = []
    loop_lag = 0.0
    for turn in turns:
        started = time.monotonic() + 0.5
        upstream.schedule(started, [variant.phases] * len(STACKS), seed=seed + number)
        # Call ids never repeat across runs: a try left over from an earlier one never counts.
        first_id = (number * len(STACKS) + (turn or 0)) * 10_000_000
        run = Run(started, first_id, variant.rate, calls, workers, variant.duration, plan.drain)
        results = lanes.run(run, timeout=0.5 + variant.duration + plan.drain + 30, only=turn)
        hits = upstream.collect()
        loop_lag = max(loop_lag, upstream.loop_lag)
        indexes = range(len(STACKS)) if turn is None else [turn]
        ran += [
            Lane(
                variant,
                STACKS[index],
                started,
                result.calls,
                [hit for hit in hits if hit.stack == index],
                result.states,
                result.issue_lag,
                result.cpu,
            )
            for index, result in zip(indexes, results, strict=True)
        ]
    return ran, loop_lag


# --- measures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measures:
    calls: int  # calls issued inside the fault window (healthy: the whole run)
    goodput: float  # the share of those that succeeded
    tries_per_call: float  # upstream tries caused by those calls, per call
    peak: int  # upstream tries in the busiest second of the run
    refused: int  # of those calls, refused by the client itself (a breaker, a guard)
    failed: int  # of those calls, failed otherwise
    p50: float
    p99: float
    waited: float  # the share that lasted the read timeout or longer
    ok_after_heal: float | None
    t95: float | None  # seconds after healing until calls kept succeeding at >= 95%
    throughput: float  # calls completed per second (closed loop)
    failed_as: str  # the commonest ways those calls failed


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def t95(records: Sequence[CallRecord], heal: float, end: float) -> float | None:
    """Start of the first 0.5 s bin (by the instant calls were issued) after healing from which
    every bin's calls succeed at least 95% of the time; None if that never happens before the
    end."""
    width = 0.5
    bins = max(1, int((end - heal) / width))
    totals, oks = [0] * bins, [0] * bins
    for record in records:
        slot = math.floor((record.issued - heal) / width + 1e-9)
        if 0 <= slot < bins:
            totals[slot] += 1
            oks[slot] += record.ok
    first_good = None
    for slot in range(bins):
        good = totals[slot] == 0 or oks[slot] >= HEALED_SHARE * totals[slot]
        if good and first_good is None:
            first_good = slot
        elif not good:
            first_good = None
    return None if first_good is None else first_good * width


def per_bin(lane: Lane, bins: int) -> list[int]:
    """Upstream tries per 100 ms bin since the variant's start."""
    counts = [0] * bins
    for hit in lane.hits:
        slot = math.floor((hit.at - lane.started) / BIN)
        if 0 <= slot < bins:
            counts[slot] += 1
    return counts


def measure(lane: Lane) -> Measures:
    variant = lane.variant
    start, end = variant.fault
    inside = [r for r in lane.calls if start <= r.issued < end]
    count = len(inside) or 1
    ids = {r.call_id for r in inside}
    tries = sum(1 for hit in lane.hits if hit.call_id in ids)
    counts = per_bin(lane, int(variant.duration / BIN) + 1)
    window = round(1.0 / BIN)
    peak = max(sum(counts[i : i + window]) for i in range(max(1, len(counts) - window + 1)))
    heal = variant.heal
    after = [r for r in lane.calls if heal is not None and r.issued >= heal]
    latencies = [r.done - r.issued for r in inside]
    refused = sum(r.refused for r in inside)
    return Measures(
        calls=len(inside),
        goodput=sum(r.ok for r in inside) / count,
        tries_per_call=tries / count,
        peak=peak,
        refused=refused,
        failed=sum(not r.ok for r in inside) - refused,
        p50=quantile(latencies, 0.5),
        p99=quantile(latencies, 0.99),
        waited=sum(latency >= TIMEOUT[1] for latency in latencies) / count,
        ok_after_heal=sum(r.ok for r in after) / len(after) if after else None,
        t95=t95(lane.calls, heal, variant.duration) if heal is not None else None,
        throughput=sum(r.ok for r in inside) / (end - start),
        failed_as=", ".join(
            f"{kind} x{n}" for kind, n in Counter(r.error for r in inside if r.error).most_common(2)
        ),
    )


def series(lane: Lane) -> Series:
    bins = int(lane.variant.duration / BIN) + 1
    offered = [0] * bins
    for record in lane.calls:
        offered[min(bins - 1, math.floor(record.issued / BIN + 1e-9))] += 1
    return Series(
        lane.variant.name,
        lane.stack_name,
        BIN,
        offered,
        per_bin(lane, bins),
        lane.variant.fault,
        lane.states,
    )


def seconds(value: float) -> str:
    if math.isinf(value):
        return "unfinished"
    if math.isnan(value):
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


# --- tables and verdicts -------------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    """DESIGN's targets for ResilientSession, read from the default config where it has them."""

    ratio: float
    max_wait: float
    recovery_timeout: float

    @classmethod
    def from_defaults(cls) -> Targets:
        defaults = Config().defaults
        budget = getattr(defaults, "budget", None)
        limit = getattr(defaults, "limit", None)
        return cls(
            ratio=float(getattr(budget, "ratio", 0.2)),
            max_wait=float(getattr(limit, "max_wait", 0.25)),
            recovery_timeout=float(defaults.breaker.recovery_timeout),
        )


def _heal(m: Measures) -> list[object]:
    return [
        f"{m.ok_after_heal:.0%}" if m.ok_after_heal is not None else "-",
        f"{m.t95:.1f} s" if m.t95 is not None else "never",
    ]


def scenario_table(lanes: Sequence[Lane]) -> str:
    scenario = lanes[0].variant.scenario
    headers = ["stack", "calls in fault", "goodput", "tries/call", "peak tries/s", "refused"]
    rows: list[list[object]] = []
    for lane in lanes:
        m = measure(lane)
        row: list[object] = [lane.stack_name, m.calls, f"{m.goodput:.1%}"]
        row += [f"{m.tries_per_call:.3f}", m.peak, m.refused]
        if scenario == "outage":
            row += [*_heal(m), seconds(m.p50), seconds(m.p99)]
        elif scenario == "hang":
            row += [f"{m.waited:.1%}", seconds(m.p50), seconds(m.p99), *_heal(m)]
        elif scenario == "healthy":
            row += [m.failed, f"{m.throughput:.1f}", seconds(m.p50), seconds(m.p99)]
        else:
            row += [seconds(m.p50), seconds(m.p99)]
        rows.append([*row, m.failed_as or "-"])
    if scenario == "outage":
        headers += ["ok after heal", "t95 after heal", "p50", "p99"]
    elif scenario == "hang":
        headers += ["waited >= 5 s", "median", "p99", "ok after heal", "t95 after heal"]
    elif scenario == "healthy":
        headers[1] = "calls"
        headers += ["failed", "calls/s", "p50", "p99"]
    else:
        headers += ["p50", "p99"]
    if scenario == "healthy":
        plain = measure(lanes[0]).throughput or math.nan
        headers.insert(8, "x plain")
        for row, lane in zip(rows, lanes, strict=True):
            row.insert(8, f"{measure(lane).throughput / plain:.3f}")
    return table([*headers, "failed as"], rows)


def brownout_summary(lanes: Sequence[Lane]) -> str:
    """Goodput and tries per call, one row per stack, one column pair per failure rate."""
    shares = sorted({lane.variant.share for lane in lanes})
    headers = ["stack", *(f"p={share:g}" for share in shares)]
    rows = []
    for name in STACKS:
        row: list[object] = [name]
        for share in shares:
            lane = next(x for x in lanes if x.stack_name == name and x.variant.share == share)
            m = measure(lane)
            row.append(f"{m.goodput:.1%} / {m.tries_per_call:.2f}")
        rows.append(row)
    return table(headers, rows)


def verdicts(lanes: Sequence[Lane], targets: Targets) -> list[list[object]]:
    """Rows of (scenario, target, ResilientSession's result, verdict)."""
    rows: list[list[object]] = []
    by_variant: dict[str, dict[str, Measures]] = {}
    for lane in lanes:
        by_variant.setdefault(lane.variant.name, {})[lane.stack_name] = measure(lane)
    for lane in lanes:
        if lane.stack_name != "ResilientSession":
            continue
        name, m, plain = lane.variant.name, measure(lane), by_variant[lane.variant.name]["requests"]
        scenario = lane.variant.scenario
        heal_limit = targets.recovery_timeout + 1
        if scenario == "outage":
            rows.append(
                [
                    name,
                    "tries/call <= 0.05",
                    f"{m.tries_per_call:.3f}",
                    verdict(m.tries_per_call <= 0.05),
                ]
            )
            rows.append(_t95_row(name, m, heal_limit))
        elif scenario == "brownout":
            bound = 1 + targets.ratio + 0.05
            if lane.variant.share <= 0.5:
                rows.append(
                    [
                        name,
                        f"goodput >= plain requests' ({plain.goodput:.1%})",
                        f"{m.goodput:.1%}",
                        verdict(m.goodput >= plain.goodput),
                    ]
                )
            rows.append(
                [
                    name,
                    f"tries/call <= {bound:g}",
                    f"{m.tries_per_call:.3f}",
                    verdict(m.tries_per_call <= bound),
                ]
            )
        elif scenario == "hang":
            median_limit = targets.max_wait + 0.05
            rows += [
                [
                    name,
                    "tries/call <= 0.1",
                    f"{m.tries_per_call:.3f}",
                    verdict(m.tries_per_call <= 0.1),
                ],
                [
                    name,
                    f"waited out the {TIMEOUT[1]:g} s timeout <= 2%",
                    f"{m.waited:.1%}",
                    verdict(m.waited <= 0.02),
                ],
                [
                    name,
                    f"median <= {seconds(median_limit)}",
                    seconds(m.p50),
                    verdict(m.p50 <= median_limit),
                ],
                _t95_row(name, m, heal_limit + TIMEOUT[1]),
            ]
        else:
            bad = m.refused + m.failed
            ratio = m.throughput / plain.throughput if plain.throughput else math.nan
            rows += [
                [
                    name,
                    "refused or failed = 0",
                    f"{m.refused} refused, {m.failed} failed",
                    verdict(bad == 0),
                ],
                [name, "throughput >= 0.97 x plain", f"{ratio:.3f}", verdict(ratio >= 0.97)],
            ]
    return rows


def _t95_row(name: str, m: Measures, limit: float) -> list[object]:
    result = f"{m.t95:.1f} s" if m.t95 is not None else "never"
    return [
        name,
        f"t95 after heal <= {limit:g} s",
        result,
        verdict(m.t95 is not None and m.t95 <= limit),
    ]


# --- main ----------------------------------------------------------------------------------------


def describe_machine() -> str:
    peers = ", ".join(
        f"{name} {version(name)}"
        for name in ("requests", "urllib3", "tenacity", "pybreaker", "structlog")
    )
    return f"{os.cpu_count()} cores, Python {platform.python_version()}, {peers}"


def _interrupt(signum: int, frame: object) -> None:
    # A kill ends the run as Ctrl-C does: through the with blocks that stop every process.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a run of a few minutes")
    parser.add_argument("--only", choices=SCENARIOS, help="run this scenario alone")
    parser.add_argument("--rate", type=float, help="calls/s per stack in the outage and hang")
    parser.add_argument(
        "--together", action="store_true", help="run the outage and hang stacks at once too"
    )
    parser.add_argument("--png", type=Path, default=Path("docs/storm.png"))
    parser.add_argument("--brownout-png", type=Path, default=Path("docs/brownout.png"))
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    plan = QUICK if args.quick else FULL
    if args.rate is not None:
        plan = Plan(**{**plan.__dict__, "rate": args.rate})
    if args.together:
        plan = Plan(**{**plan.__dict__, "in_turn": ()})
    scenarios = (args.only,) if args.only else SCENARIOS
    targets = Targets.from_defaults()
    began = time.monotonic()
    print(f"storm: {describe_machine()}")
    print(
        f"storm: {plan.rate:g} calls/s per stack (outage, hang), {plan.brownout_rate:g} "
        f"(brownout), {plan.callers} in flight (healthy); timeout {TIMEOUT}; "
        f"{'quick' if args.quick else 'full'} run of {', '.join(scenarios)}"
    )
    lanes: list[Lane] = []
    loads: list[list[object]] = []
    with (
        Upstream(stacks=len(STACKS), lifetime=900) as upstream,
        Lanes([upstream.url(i, "/v1/items") for i in range(len(STACKS))], lifetime=900) as clients,
    ):
        number = 0
        for scenario in scenarios:
            for variant in variants(scenario, plan):
                number += 1
                ran, loop_lag = run_variant(upstream, clients, variant, plan, number, args.seed)
                late = max(ran, key=lambda lane: lane.issue_lag)
                p99, worst = late.issue_lag
                held = p99 <= ISSUE_LAG_LIMIT and loop_lag <= LOOP_LAG_LIMIT
                lag = f"{seconds(p99)} / {seconds(worst)} ({late.stack_name})"
                busiest = max(ran, key=lambda lane: lane.cpu)
                # Cores the clients kept busy while calls were being made and drained.
                span = variant.duration + plan.drain
                # In turn, one lane ran at a time: the busiest is what the machine carried.
                carried = (
                    busiest.cpu if variant.scenario in plan.in_turn else sum(one.cpu for one in ran)
                )
                cores = f"{carried / span:.2f} ({busiest.stack_name} "
                cores += f"{busiest.cpu / span:.2f})"
                loads.append([variant.name, cores, lag, seconds(loop_lag), "yes" if held else "NO"])
                print(f"storm: {variant.name} done ({time.monotonic() - began:.0f} s)", flush=True)
                lanes += ran

    for name in dict.fromkeys(lane.variant.name for lane in lanes):
        print(f"\n### {name}\n")
        print(scenario_table([lane for lane in lanes if lane.variant.name == name]))
    brownouts = [lane for lane in lanes if lane.variant.scenario == "brownout"]
    if brownouts:
        print("\n### brownout: goodput / tries per call, by failure rate p\n")
        print(brownout_summary(brownouts))
    print("\n### load: did the machine keep up?\n")
    headers = ["run", "client cores (busiest)", "calls issued late by (p99 / worst, stack)"]
    headers.append("upstream loop late by")
    print(table([*headers, f"both <= {seconds(ISSUE_LAG_LIMIT)}"], loads))
    rows = verdicts(lanes, targets)
    print("\n### targets (ResilientSession)\n")
    print(table(["run", "target", "result", ""], rows))
    # A figure is written only when every run it shows has run, so --only never clips one.
    timeline = [series(lane) for lane in lanes if lane.variant.name in TIMELINE]
    if {one.run for one in timeline} == set(TIMELINE):
        plot_timeline(timeline, TIMELINE, STACKS, args.png, plan.rate)
        print(f"\nstorm: timeline written to {args.png}")
    if {lane.variant.share for lane in brownouts} == set(SHARES):
        points = [
            (lane.stack_name, lane.variant.share, m.goodput, m.tries_per_call)
            for lane in brownouts
            for m in (measure(lane),)
        ]
        bound = 1 + targets.ratio + 0.05
        plot_brownout(points, STACKS, args.brownout_png, plan.brownout_rate, bound)
        print(f"storm: brownout figure written to {args.brownout_png}")
    ok = all(row[-1] == verdict(True) for row in rows)
    print(
        f"storm: {'all targets hold' if ok else 'some targets MISSED'} "
        f"({time.monotonic() - began:.0f} s)"
    )
    return 0 if ok else 1


# The variants the timeline shows, one column each, left to right.
TIMELINE = ("outage, 503", "outage, resets", "hang", "brownout 50%")


if __name__ == "__main__":
    sys.exit(main())
