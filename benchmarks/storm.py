"""Retry storms: what five client stacks do to an upstream in an outage and a brownout.

A loopback upstream (its own process) is healthy, then fails every request for 6 s (503s in
one variant, connection resets in the other), then heals; a second scenario browns out (20%
and 50% random 503s). Every stack runs side by side on its own port under the same schedule:

  requests            plain requests.Session
  urllib3 Retry       HTTPAdapter(max_retries=Retry(total=3, backoff_factor=0.5,
                      status_forcelist=[500, 502, 503, 504]))
  tenacity            4 attempts, wait_random_exponential(multiplier=0.5, max=8), retrying
                      errors and 5xx
  pybreaker+tenacity  pybreaker.CircuitBreaker(fail_max=5, reset_timeout=5) around tenacity
  ResilientSession    defaults

Clients are open loop: a scheduler issues calls at fixed instants into a bounded thread pool
per stack, so a stalled stack cannot lower the load it is offered; latency runs from the
scheduled instant, queueing included.

Usage: python benchmarks/storm.py [--quick] [--png docs/storm.png]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import math
import platform
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pybreaker
import requests
import tenacity
from _common import table, verdict
from _upstream import CALL_ID_HEADER, Hit, Phase, Upstream
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

from resilient_session import Config, ResilientAdapter, ResilientSession

STACKS = ("requests", "urllib3 Retry", "tenacity", "pybreaker+tenacity", "ResilientSession")
# The same per-try timeouts for every stack; the upstream answers in well under a millisecond.
TIMEOUT = (1.0, 2.0)
BIN = 0.1
HEALED_SHARE = 0.95


@dataclass(frozen=True)
class Plan:
    """Rates and durations; ``--quick`` keeps the whole run under a minute."""

    rate: float  # calls per second offered to each stack
    pool: int  # worker threads per stack
    warmup: float  # healthy seconds before the fault
    outage: float
    recovery: float  # healthy seconds after the outage
    brownout: float
    drain: float  # longest wait for calls still running after the last is issued


FULL = Plan(rate=50, pool=32, warmup=4, outage=6, recovery=12, brownout=12, drain=12)
QUICK = Plan(rate=40, pool=32, warmup=1.5, outage=6, recovery=8, brownout=6, drain=8)


@dataclass(frozen=True)
class Variant:
    """One fault pattern, run against every stack at once."""

    name: str
    phases: tuple[Phase, ...]
    fault: tuple[float, float]  # seconds after the start: when the fault begins and ends
    heal: float | None  # seconds after the start at which the upstream is healthy again


def outage_variants(plan: Plan) -> list[Variant]:
    start, end = plan.warmup, plan.warmup + plan.outage
    return [
        Variant(
            f"outage, {kind}",
            (Phase(0, 0.0), Phase(start, 1.0, reset=reset), Phase(end, 0.0)),
            (start, end),
            end,
        )
        for kind, reset in (("503", False), ("resets", True))
    ]


def brownout_variants(plan: Plan) -> list[Variant]:
    start, end = plan.warmup, plan.warmup + plan.brownout
    return [
        Variant(f"brownout {share:.0%}", (Phase(0, 0.0), Phase(start, share)), (start, end), None)
        for share in (0.2, 0.5)
    ]


# --- the stacks ---------------------------------------------------------------------------------


class Stack:
    """One client stack: ``call`` returns the final response or raises; ``state`` is the
    breaker's state where the stack has one."""

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        raise NotImplementedError

    def state(self) -> str | None:
        return None


class PlainStack(Stack):
    def __init__(self, pool: int, retry: Retry | None = None) -> None:
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_maxsize=pool, max_retries=retry if retry is not None else 0)
        self.session.mount("http://", adapter)

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        return self.session.get(url, headers=headers, timeout=TIMEOUT)


def _is_server_error(response: requests.Response) -> bool:
    return response.status_code >= 500


def _last_outcome(state: tenacity.RetryCallState) -> Any:
    # When attempts run out, end as the last try did: its response, or its exception.
    assert state.outcome is not None
    return state.outcome.result()


class TenacityStack(Stack):
    def __init__(self, pool: int) -> None:
        self.session = requests.Session()
        self.session.mount("http://", HTTPAdapter(pool_maxsize=pool))
        self.retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(4),
            wait=tenacity.wait_random_exponential(multiplier=0.5, max=8),
            retry=tenacity.retry_if_exception_type(requests.RequestException)
            | tenacity.retry_if_result(_is_server_error),
            retry_error_callback=_last_outcome,
        )

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        response: requests.Response = self.retrying.copy()(
            self.session.get, url, headers=headers, timeout=TIMEOUT
        )
        return response


class BreakerTenacityStack(TenacityStack):
    def __init__(self, pool: int) -> None:
        super().__init__(pool)
        self.breaker = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=5)

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        def guarded() -> requests.Response:
            response = TenacityStack.call(self, url, headers)
            # pybreaker counts exceptions only: a final 5xx must raise to count as a failure.
            response.raise_for_status()
            return response

        response: requests.Response = self.breaker.call(guarded)
        return response

    def state(self) -> str | None:
        return str(self.breaker.current_state).replace("-", "_")


class ResilientStack(Stack):
    def __init__(self, pool: int) -> None:
        self.session = ResilientSession()
        # Only the pool size changes, as for the other stacks: one connection per worker.
        self.session.mount(
            "http://", ResilientAdapter(registry=self.session.registry, pool_maxsize=pool)
        )
        self._host = ""

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        self._host = self._host or url.split("/", 3)[2]
        return self.session.get(url, headers=headers, timeout=TIMEOUT)

    def state(self) -> str | None:
        for key, health in self.session.health().items():
            if key.endswith(self._host) and self._host:
                return str(health.breaker.value)
        return "closed"


def build_stack(name: str, pool: int) -> Stack:
    if name == "requests":
        return PlainStack(pool)
    if name == "urllib3 Retry":
        retry = Retry(total=3, backoff_factor=0.5, status_forcelist=[500, 502, 503, 504])
        return PlainStack(pool, retry)
    if name == "tenacity":
        return TenacityStack(pool)
    if name == "pybreaker+tenacity":
        return BreakerTenacityStack(pool)
    return ResilientStack(pool)


# --- running a scenario ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CallRecord:
    call_id: int
    scheduled: float  # seconds after the start
    done: float  # seconds after the start; inf when still running at the end of the drain
    ok: bool
    error: str | None


@dataclass
class Lane:
    """One stack under one variant: its own port, pool, calls, hits and breaker samples."""

    variant: Variant
    stack_name: str
    stack: Stack
    url: str
    pool: ThreadPoolExecutor
    started: float = 0.0  # time.monotonic() of the scenario's start; hits share that clock
    calls: list[CallRecord] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    states: list[tuple[float, str]] = field(default_factory=list)


def run_scenario(
    upstream: Upstream, variants: Sequence[Variant], plan: Plan, duration: float, seed: int
) -> list[Lane]:
    lanes: list[Lane] = []
    for variant in variants:
        for name in STACKS:
            index = len(lanes)
            pool = ThreadPoolExecutor(plan.pool, thread_name_prefix=f"lane{index}")
            stack = build_stack(name, plan.pool)
            lanes.append(Lane(variant, name, stack, upstream.url(index, "/v1/items"), pool))
    started = time.monotonic() + 0.5
    upstream.schedule(started, [lane.variant.phases for lane in lanes], seed=seed)
    lock = threading.Lock()
    stop = threading.Event()

    def one_call(lane: Lane, call_id: int, at: float) -> None:
        error = None
        try:
            status = lane.stack.call(lane.url, {CALL_ID_HEADER: str(call_id)}).status_code
            ok = status == 200
            error = None if ok else f"HTTP {status}"
        except Exception as exc:  # noqa: BLE001 - every failure is an outcome to count
            ok, error = False, type(exc).__name__
        # Offsets from the call's number, not from clock readings, so bin edges stay exact.
        offset = call_id / plan.rate
        record = CallRecord(call_id, offset, offset + time.monotonic() - at, ok, error)
        with lock:
            lane.calls.append(record)

    def sample_breakers() -> None:
        while not stop.wait(0.05):
            now = time.monotonic() - started
            for lane in lanes:
                state = lane.stack.state()
                if state is not None:
                    lane.states.append((now, state))

    sampler = threading.Thread(target=sample_breakers, name="breaker-sampler", daemon=True)
    sampler.start()
    futures: list[Future[None]] = []
    issued: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for call_id in range(int(duration * plan.rate)):
        at = started + call_id / plan.rate
        delay = at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for index, lane in enumerate(lanes):
            futures.append(lane.pool.submit(one_call, lane, call_id, at))
            issued[index].append((call_id, call_id / plan.rate))
    wait_futures(futures, timeout=plan.drain)
    stop.set()
    sampler.join(1)
    for lane in lanes:
        lane.pool.shutdown(wait=False, cancel_futures=True)
    hits = upstream.collect()
    with lock:
        for index, lane in enumerate(lanes):
            finished = {record.call_id for record in lane.calls}
            # A call still running after the drain counts as failed, with unbounded latency.
            lane.calls += [
                CallRecord(call_id, at, math.inf, False, "unfinished")
                for call_id, at in issued[index]
                if call_id not in finished
            ]
            lane.hits = [hit for hit in hits if hit.stack == index]
            lane.started = started
    return lanes


# --- measures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measures:
    calls: int  # logical calls issued inside the fault window
    tries_per_call: float  # upstream tries caused by those calls, per call
    peak: int  # upstream tries in the busiest second of the run
    ok_in_fault: float
    ok_after_heal: float | None
    t95: float | None  # seconds after healing until calls kept succeeding at >= 95%
    p50: float
    p99: float
    failed_as: str  # the commonest ways calls failed, over the whole run


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _t95(records: Sequence[CallRecord], heal: float, end: float) -> float | None:
    """Start of the first 0.5 s bin (by scheduled time) after healing from which every bin's
    calls succeed at least 95% of the time; None if that never happens before the end."""
    width = 0.5
    bins = max(1, int((end - heal) / width))
    totals, oks = [0] * bins, [0] * bins
    for record in records:
        slot = math.floor((record.scheduled - heal) / width + 1e-9)
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


def measure(lane: Lane, duration: float) -> Measures:
    start, end = lane.variant.fault
    in_fault = [r for r in lane.calls if start <= r.scheduled < end]
    ids = {r.call_id for r in in_fault}
    tries = sum(1 for hit in lane.hits if hit.call_id in ids)
    counts = _per_bin(lane, int(duration / BIN) + 1)
    window = round(1.0 / BIN)
    peak = max(sum(counts[i : i + window]) for i in range(max(1, len(counts) - window + 1)))
    heal = lane.variant.heal
    after = [r for r in lane.calls if heal is not None and r.scheduled >= heal]
    latencies = [r.done - r.scheduled for r in lane.calls]
    return Measures(
        calls=len(in_fault),
        tries_per_call=tries / len(in_fault) if in_fault else math.nan,
        peak=peak,
        ok_in_fault=sum(r.ok for r in in_fault) / len(in_fault) if in_fault else math.nan,
        ok_after_heal=sum(r.ok for r in after) / len(after) if after else None,
        t95=_t95(lane.calls, heal, duration) if heal is not None else None,
        p50=_quantile(latencies, 0.5),
        p99=_quantile(latencies, 0.99),
        failed_as=", ".join(
            f"{kind} x{count}"
            for kind, count in Counter(r.error for r in lane.calls if r.error).most_common(2)
        ),
    )


def _per_bin(lane: Lane, bins: int) -> list[int]:
    """Upstream tries per 100 ms bin since the scenario's start."""
    counts = [0] * bins
    for hit in lane.hits:
        slot = math.floor((hit.at - lane.started) / BIN)
        if 0 <= slot < bins:
            counts[slot] += 1
    return counts


def _seconds(value: float) -> str:
    if math.isinf(value):
        return "unfinished"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


# --- the picture ---------------------------------------------------------------------------------

_SHADES = {"open": ("#d62728", 0.18), "half_open": ("#ff7f0e", 0.25)}


def plot(lanes: Sequence[Lane], durations: dict[str, float], path: Path, rate: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    variants = list(dict.fromkeys(lane.variant.name for lane in lanes))
    figure, axes = plt.subplots(
        len(STACKS),
        len(variants),
        figsize=(4.6 * len(variants), 1.9 * len(STACKS)),
        sharey="row",
        squeeze=False,
    )
    for lane in lanes:
        column = variants.index(lane.variant.name)
        row = STACKS.index(lane.stack_name)
        axis = axes[row][column]
        duration = durations[lane.variant.name]
        bins = int(duration / BIN) + 1
        offered = [0] * bins
        for record in lane.calls:
            offered[min(bins - 1, math.floor(record.scheduled / BIN + 1e-9))] += 1
        hits = _per_bin(lane, bins)
        xs = [i * BIN for i in range(bins)]
        start, end = lane.variant.fault
        axis.axvspan(start, end, color="#7f7f7f", alpha=0.12, lw=0)
        for state_start, state_end, state in _spans(lane.states):
            if state in _SHADES:
                color, alpha = _SHADES[state]
                axis.axvspan(state_start, state_end, color=color, alpha=alpha, lw=0)
        # Drawn wide and first, so it shows where the tries line runs on top of it.
        axis.step(xs, offered, where="post", color="#1f77b4", lw=2.4, alpha=0.55)
        axis.step(xs, hits, where="post", color="#2ca02c", lw=1.0)
        axis.set_xlim(0, duration)
        if row == 0:
            axis.set_title(lane.variant.name, fontsize=10)
        if column == 0:
            axis.set_ylabel(lane.stack_name, fontsize=9)
        if row == len(STACKS) - 1:
            axis.set_xlabel("seconds", fontsize=8)
        axis.tick_params(labelsize=7)
    handles = [
        Line2D([], [], color="#1f77b4", lw=2.4, alpha=0.55, label="calls offered per 100 ms"),
        Line2D([], [], color="#2ca02c", label="upstream tries per 100 ms"),
        Patch(color="#7f7f7f", alpha=0.25, label="fault window"),
        Patch(color="#d62728", alpha=0.3, label="breaker open"),
        Patch(color="#ff7f0e", alpha=0.4, label="breaker half-open"),
    ]
    figure.suptitle(
        f"Calls offered vs tries the upstream saw, {rate:g} calls/s per stack "
        "(y scale shared along each row)",
        y=0.995,
        fontsize=11,
    )
    figure.legend(
        handles=handles,
        loc="upper center",
        ncol=5,
        fontsize=9,
        frameon=False,
        bbox_to_anchor=(0.5, 0.975),
    )
    figure.tight_layout(rect=(0, 0, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def _spans(states: Sequence[tuple[float, str]]) -> list[tuple[float, float, str]]:
    spans: list[tuple[float, float, str]] = []
    for (at, state), (following, _) in itertools.pairwise(states):
        if spans and spans[-1][2] == state and abs(spans[-1][1] - at) < 1e-9:
            spans[-1] = (spans[-1][0], following, state)
        else:
            spans.append((at, following, state))
    return spans


# --- main ----------------------------------------------------------------------------------------


def describe_machine() -> str:
    import os

    peers = ", ".join(
        f"{name} {version(name)}"
        for name in ("requests", "urllib3", "tenacity", "pybreaker", "structlog")
    )
    return f"{os.cpu_count()} cores, Python {platform.python_version()}, {peers}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a run under a minute")
    parser.add_argument("--png", type=Path, default=Path("docs/storm.png"))
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    # urllib3 logs every retry and full pool at WARNING; the tables say what matters.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    began = time.monotonic()
    print(f"storm: {describe_machine()}")
    print(
        f"storm: {plan.rate:g} calls/s per stack, {plan.pool} workers per stack, "
        f"outage {plan.outage:g} s, {'quick' if args.quick else 'full'} run"
    )
    config = Config()
    recovery_timeout = config.defaults.breaker.recovery_timeout
    ratio = config.defaults.budget.ratio

    outage_duration = plan.warmup + plan.outage + plan.recovery
    brownout_duration = plan.warmup + plan.brownout
    durations: dict[str, float] = {}
    lanes: list[Lane] = []
    with Upstream(stacks=2 * len(STACKS), lifetime=300) as upstream:
        for variants, duration in (
            (outage_variants(plan), outage_duration),
            (brownout_variants(plan), brownout_duration),
        ):
            for variant in variants:
                durations[variant.name] = duration
            lanes += run_scenario(upstream, variants, plan, duration, args.seed)

    ok = True
    for variant_name in durations:
        rows = []
        for lane in (lane for lane in lanes if lane.variant.name == variant_name):
            m = measure(lane, durations[variant_name])
            brownout = lane.variant.heal is None
            row: list[object] = [
                lane.stack_name,
                f"{m.calls}",
                f"{m.tries_per_call:.3f}",
                f"{m.tries_per_call - 1:+.3f}",
                f"{m.peak}",
                f"{m.ok_in_fault:.0%}",
            ]
            if not brownout:
                row += [
                    f"{m.ok_after_heal:.0%}" if m.ok_after_heal is not None else "-",
                    f"{m.t95:.1f} s" if m.t95 is not None else "never",
                ]
            row += [_seconds(m.p50), _seconds(m.p99), m.failed_as or "-"]
            if lane.stack_name == "ResilientSession":
                if brownout:
                    holds = m.tries_per_call <= 1 + ratio
                    # The bucket's own bound: ratio per first try, plus the full bucket it
                    # starts with and the reserve min_per_second refills during the fault.
                    budget = config.defaults.budget
                    reserve = budget.max_tokens + budget.min_per_second * plan.brownout
                    bound = 1 + ratio + reserve / m.calls
                    row.append(
                        f"tries/call <= {1 + ratio:g}: {verdict(holds)} "
                        f"(bucket bound {bound:.2f}: {verdict(m.tries_per_call <= bound)})"
                    )
                else:
                    amplification_ok = m.tries_per_call <= 0.05
                    heal_ok = m.t95 is not None and m.t95 <= recovery_timeout + 1
                    holds = amplification_ok and heal_ok
                    row.append(
                        f"tries/call <= 0.05: {verdict(amplification_ok)}; "
                        f"t95 <= {recovery_timeout + 1:g} s: {verdict(heal_ok)}"
                    )
                ok &= holds
            else:
                row.append("")
            rows.append(row)
        headers = ["stack", "calls in fault", "tries/call", "hits/calls - 1", "peak tries/s"]
        headers.append("ok in fault")
        if rows and len(rows[0]) == 12:
            headers += ["ok after heal", "t95 after heal"]
        headers += ["p50", "p99", "failed as", "target (ResilientSession)"]
        print(f"\n### {variant_name}\n")
        print(table(headers, rows))
    plot(lanes, durations, args.png, plan.rate)
    print(f"\nstorm: timeline written to {args.png}")
    print(
        f"storm: {'all targets hold' if ok else 'some targets MISSED'} "
        f"({time.monotonic() - began:.0f} s)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
