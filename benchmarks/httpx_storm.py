"""httpx storms: plain httpx and httpx-retries side by side, in four failure shapes.

A loopback upstream (its own process, benchmarks/_upstream.py) serves each stack on a port of
its own. Each stack runs alone on the machine, one after another, under the same schedule, in
an open loop: calls are issued at fixed instants (--rate a second, for --seconds), each as a
task of the client's event loop (AsyncClient) or on a pool of 64 threads (Client), so a
stalled stack cannot lower the load it is offered; a call's latency runs from its instant.
Every try has httpx's timeout of 5 s (connect, read, write, pool).

  outage    every answer 503
  brownout  503 at p = 0.5
  hang      the upstream reads each request and never answers it (the 5 s timeouts end it);
            a heartbeat task on the client's loop, every 10 ms, measures how late it runs
  tail      3 % of the tries answered after 1 s, the others after 5 ms

Stacks: plain httpx (its AsyncClient and Client), and httpx-retries' RetryTransport with its
defaults (Retry(): 10 tries, no backoff, 429/502/503/504 and timeouts and network errors)
and tuned as storm.py tunes urllib3's Retry (3 tries, backoff_factor 0.5). The project's own
rows come from resilient_stacks(), a list of (name, client factory): empty until
resilient_session.httpx lands, then its AsyncResilientClient and ResilientClient.

Per stack: calls issued, tries per call (requests the upstream read, by each call's
X-Call-Id), goodput (calls answered 200, per second of the --seconds they were issued in),
p50 and p99 latency, the heartbeat's
worst lateness (async stacks) and how late the open loop issued its calls. Calls still
running --drain seconds after the last was issued are cut and counted at that latency.

Usage: python benchmarks/httpx_storm.py [--seconds S] [--rate N] [--drain S]
                                        [--only SCENARIO] [--async-only]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field
from importlib.metadata import version

import anyio
import httpx
from _common import table
from _upstream import CALL_ID_HEADER, Phase, Upstream
from httpx_retries import Retry, RetryTransport

SCENARIOS: dict[str, Phase] = {
    "outage": Phase(0.0, fail=1.0),
    "brownout": Phase(0.0, fail=0.5),
    "hang": Phase(0.0, fail=1.0, hang=True),
    "tail": Phase(0.0, fail=0.0, latency=0.005, slow=0.03, slow_latency=1.0),
}
TIMEOUT = httpx.Timeout(5.0)
HEARTBEAT = 0.01
THREADS = 64

AsyncFactory = Callable[[], httpx.AsyncClient]
SyncFactory = Callable[[], httpx.Client]


@dataclass(frozen=True)
class AsyncStack:
    """A stack whose calls are tasks of one event loop: a name and how to build its client."""

    name: str
    make: AsyncFactory


@dataclass(frozen=True)
class SyncStack:
    """A stack whose calls run on threads: a name and how to build its client."""

    name: str
    make: SyncFactory


Stack = AsyncStack | SyncStack


def peer_stacks(async_only: bool = False) -> list[Stack]:
    """What an httpx user has today: plain httpx and httpx-retries, async and sync."""

    def tuned() -> Retry:
        return Retry(total=3, backoff_factor=0.5)

    stacks: list[Stack] = [
        AsyncStack("httpx AsyncClient", lambda: httpx.AsyncClient(timeout=TIMEOUT)),
        AsyncStack(
            "httpx-retries (defaults) async",
            lambda: httpx.AsyncClient(transport=RetryTransport(), timeout=TIMEOUT),
        ),
        AsyncStack(
            "httpx-retries (3, 0.5) async",
            lambda: httpx.AsyncClient(transport=RetryTransport(retry=tuned()), timeout=TIMEOUT),
        ),
        SyncStack("httpx Client", lambda: httpx.Client(timeout=TIMEOUT)),
        SyncStack(
            "httpx-retries (3, 0.5) sync",
            lambda: httpx.Client(transport=RetryTransport(retry=tuned()), timeout=TIMEOUT),
        ),
    ]
    return [stack for stack in stacks if isinstance(stack, AsyncStack) or not async_only]


def resilient_stacks(async_only: bool = False) -> list[Stack]:
    """The project's own rows, each a name and a client factory, run exactly as the peers':
    both clients with the default configuration, and the async one with hedging on (``auto``:
    a hedge after the host's p95, the tail's cure)."""
    from resilient_session.httpx import AsyncResilientClient, ResilientClient

    hedging = {"defaults": {"hedging": {"enabled": True}}}
    stacks: list[Stack] = [
        AsyncStack("AsyncResilientClient", lambda: AsyncResilientClient(timeout=TIMEOUT)),
        AsyncStack(
            "AsyncResilientClient hedging",
            lambda: AsyncResilientClient(hedging, timeout=TIMEOUT),
        ),
        SyncStack("ResilientClient", lambda: ResilientClient(timeout=TIMEOUT)),
    ]
    return [stack for stack in stacks if isinstance(stack, AsyncStack) or not async_only]


@dataclass
class Result:
    """What one stack did in one scenario."""

    issued: int = 0
    latencies: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    issue_lag: float = 0.0
    heartbeat_lag: float | None = None
    # Counted and closed: a call that ends after is left out, as counted unfinished.
    closed: bool = False

    def record(self, started: float, outcome: str) -> None:
        if not self.closed:
            self.latencies.append(time.monotonic() - started)
            self.outcomes[outcome] += 1

    def count_unfinished(self, latency: float) -> None:
        """Calls issued and not ended: counted at *latency*, the longest a run waits."""
        unfinished = self.issued - len(self.latencies)
        if unfinished > 0:
            self.latencies += [latency] * unfinished
            self.outcomes["unfinished"] += unfinished


def _outcome(call: Callable[[], httpx.Response]) -> str:
    try:
        return str(call().status_code)
    except httpx.HTTPError as error:
        return type(error).__name__


async def drive_async(
    make: AsyncFactory, url: str, rate: float, seconds: float, drain: float
) -> Result:
    """Issue calls at *rate* a second for *seconds* as tasks of one loop, a heartbeat beside
    them; calls still running *drain* seconds after the last was issued are cut."""
    result = Result()
    lags: list[float] = []
    stop = anyio.Event()

    async def heartbeat() -> None:
        while not stop.is_set():
            due = time.monotonic() + HEARTBEAT
            await anyio.sleep(HEARTBEAT)
            lags.append(time.monotonic() - due)

    async def call(client: httpx.AsyncClient, number: int, due: float) -> None:
        headers = {CALL_ID_HEADER: str(number)}
        try:
            response = await client.get(url, headers=headers)
            outcome = str(response.status_code)
        except httpx.HTTPError as error:
            outcome = type(error).__name__
        result.record(due, outcome)

    async with make() as client:
        began = time.monotonic()
        # The heartbeat is cut with the calls: cancelling hundreds of calls at once is the
        # benchmark's own work, not the stack's.
        with anyio.move_on_after(seconds + drain):
            async with anyio.create_task_group() as calls:
                calls.start_soon(heartbeat)
                for number in range(round(rate * seconds)):
                    due = began + number / rate
                    await anyio.sleep(max(0.0, due - time.monotonic()))
                    result.issue_lag = max(result.issue_lag, time.monotonic() - due)
                    calls.start_soon(call, client, number, due)
                    result.issued += 1
                while len(result.latencies) < result.issued:
                    await anyio.sleep(HEARTBEAT)
                stop.set()
        result.count_unfinished(seconds + drain)
    result.heartbeat_lag = max(lags, default=0.0)
    return result


def drive_sync(make: SyncFactory, url: str, rate: float, seconds: float, drain: float) -> Result:
    """Issue calls at *rate* a second for *seconds* onto THREADS threads; calls not done
    *drain* seconds after the last was issued are counted unfinished (their threads end
    with their timeouts)."""
    result = Result()
    lock = threading.Lock()
    with make() as client, ThreadPoolExecutor(THREADS) as pool:

        def call(number: int, due: float) -> None:
            headers = {CALL_ID_HEADER: str(number)}
            outcome = _outcome(lambda: client.get(url, headers=headers))
            with lock:
                result.record(due, outcome)

        began = time.monotonic()
        futures = []
        for number in range(round(rate * seconds)):
            due = began + number / rate
            time.sleep(max(0.0, due - time.monotonic()))
            result.issue_lag = max(result.issue_lag, time.monotonic() - due)
            futures.append(pool.submit(call, number, due))
            result.issued += 1
        wait_for(futures, timeout=max(0.0, began + seconds + drain - time.monotonic()))
        with lock:
            result.count_unfinished(seconds + drain)
            result.closed = True
        # Leaving the pool waits for the calls still running (each ends with its timeouts),
        # so none is left to run beside the next stack.
    return result


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f}"


def run(scenario: str, stacks: Sequence[Stack], args: argparse.Namespace) -> str:
    """Every stack in turn under *scenario*; a table of what each did."""
    rows = []
    with Upstream(stacks=len(stacks)) as upstream:
        for index, stack in enumerate(stacks):
            phases: list[list[Phase]] = [[] for _ in stacks]
            phases[index] = [SCENARIOS[scenario]]
            upstream.schedule(time.monotonic(), phases)
            url = upstream.url(index)
            # Each stack starts on the heap a service has after start-up (gc.freeze, as
            # instr_meter.py's children do): what earlier stacks left behind is neither
            # collected during this one, which would stall its loop (the heartbeat), nor
            # walked by its own collections.
            gc.collect()
            gc.freeze()
            try:
                if isinstance(stack, AsyncStack):
                    result = anyio.run(
                        drive_async, stack.make, url, args.rate, args.seconds, args.drain
                    )
                else:
                    result = drive_sync(stack.make, url, args.rate, args.seconds, args.drain)
            finally:
                gc.unfreeze()
            hits = [hit for hit in upstream.collect() if hit.stack == index]
            ok = result.outcomes["200"]
            rows.append(
                (
                    stack.name,
                    result.issued,
                    f"{len(hits) / max(result.issued, 1):.2f}",
                    f"{ok / args.seconds:.1f}",
                    f"{100 * ok / max(result.issued, 1):.0f}",
                    _ms(_percentile(result.latencies, 0.5)),
                    _ms(_percentile(result.latencies, 0.99)),
                    _ms(result.heartbeat_lag),
                    _ms(result.issue_lag),
                    ", ".join(f"{name} {count}" for name, count in result.outcomes.most_common(3)),
                )
            )
    headers = (
        "stack",
        "calls",
        "tries/call",
        "goodput/s",
        "ok %",
        "p50 ms",
        "p99 ms",
        "heartbeat ms",
        "issue lag ms",
        "outcomes",
    )
    return f"### {scenario}\n\n" + table(headers, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of calls a run")
    parser.add_argument("--rate", type=float, default=50.0, help="calls a second per stack")
    parser.add_argument("--drain", type=float, default=12.0, help="longest wait after a run")
    parser.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--async-only", action="store_true", help="leave out the sync stacks")
    args = parser.parse_args(argv)
    stacks = [*peer_stacks(args.async_only), *resilient_stacks(args.async_only)]
    load = os.getloadavg()
    print(
        f"# httpx storm: {args.rate:g} calls/s for {args.seconds:g} s per stack\n\n"
        f"CPython {platform.python_version()}, httpx {version('httpx')}, httpcore "
        f"{version('httpcore')}, anyio {version('anyio')}, httpx-retries "
        f"{version('httpx-retries')}; {os.cpu_count()} cores, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start\n"
    )
    for scenario in args.only or SCENARIOS:
        print(run(scenario, stacks, args), end="\n\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
