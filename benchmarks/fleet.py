"""Fleet state: eight worker processes that protect an upstream as one client, on a Redis that
may die or hang.

Every worker is a process of its own with one ResilientSession, as a gunicorn or celery
worker is; the benchmark starts its own redis-server on a free loopback port (never the
machine's) and a loopback upstream in a process of its own (benchmarks/_upstream.py).

  outage    two fleets of 8 workers side by side, one on the redis backend and one on the
            memory backend, each calling its own port of the upstream (4 threads per worker,
            open loop); after a healthy warm-up the upstream answers only 503. Measured: the
            fleet's tries before every worker fails fast (target <= 2 x failure_threshold;
            memory about 8 x), and the fleet's retries against one budget's worth.
  cost      the healthy hot path in one process, no network (a canned transport, as in
            benchmarks/overhead.py): a memory session and a redis session, its sync thread
            running against the real Redis, timed in interleaved batches; the median of the
            per-pair differences is the redis backend's added cost per call (target <= 20 us).
  push      fleets of 8 and of 16 redis-backed workers at failure_threshold 5, round after
            round on a host that goes down (benchmarks/_fleet_push.py), on the one
            redis-server and then on a Redis Cluster of 3 masters the benchmark starts on
            loopback ports (--mode). Measured: the tries that left a worker after the fleet's
            first opening, before every worker fails fast (target <= 2 in every round, at
            each fleet size, on each Redis), beside the tries already in flight at that
            opening.
  faults    8 redis-backed workers calling a healthy upstream; Redis is killed for 5 s and
            restarted, then paused (SIGSTOP) for 5 s and resumed; then the upstream goes down.
            Measured: caller errors (target 0), state.degraded and state.restored events per
            worker per outage (target 1 each), how long after Redis returned each worker
            followed the fleet again (target within one sync interval, plus the one command
            timeout a sync in flight may still be waiting out), and the fleet's tries before
            every worker fails fast once the upstream goes down after it all.

Usage: python benchmarks/fleet.py [--quick] [--only outage|push|cost|faults]
                                  [--mode single|cluster|both]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import version
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import _repo_root  # noqa: F401 - devservers/ on sys.path
from _common import canned_transport, table, verdict
from _fleet_push import THRESHOLD as PUSH_THRESHOLD
from _fleet_push import PushPlan
from _fleet_push import measure as measure_push
from _upstream import CALL_ID_HEADER, Phase, Upstream
from devservers import RedisServer
from devservers.redis_cluster import RedisClusterNodes

from resilient_session import CircuitOpenError, ResilientSession, log_json_lines

WORKERS = 8
THREADS = 4  # per worker: a retry's backoff wait must not stall the worker's schedule
RATE = 25.0  # calls per second per worker
THRESHOLD = 20  # the default failure_threshold
INTERVAL_MS = 100  # the default sync_interval_ms
TIMEOUT_MS = 20  # the default timeout_ms
RETRY = {"backoff_base": 0.05, "backoff_cap": 0.5}
# Openings outlast the run, so every try after them is one the breaker let through.
BREAKER = {"recovery_timeout": 60.0}


def config(backend: str, url: str, prefix: str) -> dict[str, Any]:
    """The defaults, but short backoff waits and openings that outlast the run."""
    return {
        "defaults": {"retry": RETRY, "breaker": BREAKER},
        "state": {"backend": backend, "url": url, "key_prefix": prefix},
    }


@dataclass(frozen=True)
class Plan:
    warmup: float
    outage: float
    down: float  # faults: Redis killed, then paused, for this long each
    settle: float  # faults: seconds between the steps
    rounds: int  # cost: interleaved pairs of batches
    batch: int  # cost: calls per batch
    push: PushPlan


FULL = Plan(
    warmup=3.0,
    outage=4.0,
    down=5.0,
    settle=3.0,
    rounds=41,
    batch=2000,
    push=PushPlan(rounds=6, warmup=1.5, down=1.0),
)
QUICK = Plan(
    warmup=2.0,
    outage=3.0,
    down=5.0,
    settle=2.0,
    rounds=15,
    batch=1000,
    push=PushPlan(rounds=3, warmup=1.5, down=1.0),
)
PUSH_FLEETS = (8, 16)
PUSH_MODES = ("single", "cluster")
CLUSTER_MASTERS = 3
# No replicas: nothing fails over in the push part, and a replica would only add a process
# copying every write onto the same 2 cores.
CLUSTER_REPLICAS = 0
# A node starved of CPU by other work for a second is not to be failed: with no replica to
# take over, the cluster would refuse every slot until it answered again.
CLUSTER_NODE_TIMEOUT_MS = 5000


# -- worker processes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    at: float  # time.monotonic() when the call ended
    worker: int
    outcome: str  # "ok", "503", "fail_fast", or the exception's class name


def _worker(
    conn: Connection, index: int, cfg: dict[str, Any], url: str, duration: float, log_path: str
) -> None:
    """Say ready, get the start instant, then call *url* at RATE calls/s from THREADS threads
    until *duration* is over; send back every call's outcome and health, and leave the state
    events in *log_path*."""
    with open(log_path, "w", encoding="utf-8") as log:
        log_json_lines(log, level=logging.WARNING)
        session = ResilientSession(cfg)
        calls: list[Call] = []
        conn.send("ready")
        start_at: float = conn.recv()
        lock = threading.Lock()

        def run(thread: int) -> None:
            period = THREADS / RATE
            number = 0
            while True:
                due = start_at + (number + thread / THREADS) * period
                if due - start_at >= duration:
                    return
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                call_id = (index * THREADS + thread) * 1_000_000 + number
                try:
                    response = session.get(
                        url, headers={CALL_ID_HEADER: str(call_id)}, timeout=(1.0, 5.0)
                    )
                    outcome = "ok" if response.status_code == 200 else str(response.status_code)
                except CircuitOpenError:
                    outcome = "fail_fast"
                except Exception as exc:  # noqa: BLE001 - every other error is counted
                    outcome = type(exc).__name__
                with lock:
                    calls.append(Call(time.monotonic(), index, outcome))
                number += 1

        threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(duration + 30)
        health = {host: h.as_dict() for host, h in session.health().items()}
        session.close()
    conn.send((calls, health))
    conn.close()


class Fleet:
    """WORKERS worker processes started together, joined together."""

    def __init__(self, name: str, cfg: dict[str, Any], url: str, duration: float):
        self.name = name
        context = multiprocessing.get_context("spawn")
        self._directory = tempfile.TemporaryDirectory(prefix=f"fleet-{name}-")
        self.logs = [Path(self._directory.name) / f"{i}.jsonl" for i in range(WORKERS)]
        self._conns = []
        self._processes = []
        for index in range(WORKERS):
            parent, child = context.Pipe()
            process = context.Process(
                target=_worker,
                args=(child, index, cfg, url, duration, str(self.logs[index])),
                daemon=True,
            )
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)
        self.duration = duration

    def ready(self) -> None:
        """Wait until every worker has imported everything and built its session."""
        for conn in self._conns:
            if not conn.poll(120) or conn.recv() != "ready":
                raise RuntimeError(f"a {self.name} worker did not start")

    def start(self, start_at: float) -> None:
        for conn in self._conns:
            conn.send(start_at)

    def results(self) -> tuple[list[Call], list[dict[str, Any]], list[list[dict[str, Any]]]]:
        calls: list[Call] = []
        healths = []
        for conn in self._conns:
            if not conn.poll(self.duration + 120):
                raise RuntimeError(f"a {self.name} worker did not report")
            worker_calls, health = conn.recv()
            calls += worker_calls
            healths.append(health)
        for process in self._processes:
            process.join(10)
            if process.is_alive():
                process.terminate()
        events = [
            [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
            for path in self.logs
        ]
        self._directory.cleanup()
        return calls, healths, events


def _start(fleets: list[Fleet]) -> float:
    """Start every fleet's workers at one instant, once all are ready; returns it."""
    for fleet in fleets:
        fleet.ready()
    start_at = time.monotonic() + 0.5
    for fleet in fleets:
        fleet.start(start_at)
    return start_at


# -- outage -----------------------------------------------------------------------------------


def outage(plan: Plan, redis_url: str) -> dict[str, Any]:
    duration = plan.warmup + plan.outage
    with Upstream(stacks=2) as upstream:
        fleets = [
            Fleet("redis", config("redis", redis_url, "bench-outage:"), upstream.url(0), duration),
            Fleet("memory", config("memory", redis_url, "unused:"), upstream.url(1), duration),
        ]
        start_at = _start(fleets)
        down_at = start_at + plan.warmup
        phases = [Phase(0, 0.0), Phase(plan.warmup, 1.0)]
        upstream.schedule(start_at, [phases, phases])
        results = [fleet.results() for fleet in fleets]
        hits = upstream.collect()
    rows = {}
    for stack, (fleet, (calls, healths, _events)) in enumerate(zip(fleets, results, strict=True)):
        down_hits = [hit for hit in hits if hit.stack == stack and hit.at >= down_at]
        tries = len(down_hits)
        first_tries = len({hit.call_id for hit in down_hits})
        retries = tries - first_tries
        fast = {}
        for call in calls:
            if call.outcome == "fail_fast" and call.worker not in fast:
                fast[call.worker] = call.at
        all_fast_after = max(fast.values()) - down_at if len(fast) == WORKERS else math.nan
        outage_calls = sum(1 for call in calls if call.at >= down_at)
        errors = Counter(c.outcome for c in calls if c.outcome not in ("ok", "503", "fail_fast"))
        rows[fleet.name] = {
            "tries": tries,
            "retries": retries,
            "first_tries": first_tries,
            "outage_calls": outage_calls,
            "all_fail_fast_after": all_fast_after,
            "errors": dict(errors),
            "open": sum(1 for health in healths for h in health.values() if h["breaker"] == "open"),
        }
    return rows


# -- cost -------------------------------------------------------------------------------------


def cost(plan: Plan, redis_url: str) -> dict[str, Any]:
    url = "http://api.bench.test/v1/items?id=42"  # as benchmarks/overhead.py
    memory = ResilientSession(config("memory", redis_url, "unused:"))
    shared = ResilientSession(config("redis", redis_url, "bench-cost:"))
    # requests reads every environment variable on each call while trust_env is on (proxies,
    # netrc): hundreds of us on a machine with a large environment, the same on both sides, and
    # noise around a difference of a few us.
    memory.trust_env = shared.trust_env = False
    per_call: dict[str, list[float]] = {"memory": [], "redis": []}
    with canned_transport():
        for session in (memory, shared):
            for _ in range(plan.batch):
                session.get(url)
        # The redis session's host is synced: its sync thread runs throughout.
        time.sleep(3 * INTERVAL_MS / 1000)
        for round_number in range(plan.rounds):
            order = [("memory", memory), ("redis", shared)]
            if round_number % 2:
                order.reverse()
            for name, session in order:
                gc.collect()
                began = time.perf_counter_ns()
                for _ in range(plan.batch):
                    session.get(url)
                per_call[name].append((time.perf_counter_ns() - began) / plan.batch / 1000)
    degraded = shared.health()["http://api.bench.test:80"].state_degraded
    memory.close()
    shared.close()
    pairs = list(zip(per_call["memory"], per_call["redis"], strict=True))
    return {
        "memory_us": statistics.median(per_call["memory"]),
        "redis_us": statistics.median(per_call["redis"]),
        "added_us": statistics.median([r - m for m, r in pairs]),
        "ratio": statistics.median([r / m for m, r in pairs]),
        "degraded": degraded,
        "calls": 2 * plan.rounds * plan.batch,
    }


# -- faults -----------------------------------------------------------------------------------


def faults(plan: Plan, server: RedisServer) -> dict[str, Any]:
    kill_at = plan.warmup
    restart_at = kill_at + plan.down
    pause_at = restart_at + plan.settle
    resume_at = pause_at + plan.down
    down_at = resume_at + plan.settle
    duration = down_at + plan.outage
    with Upstream(stacks=1) as upstream:
        fleet = Fleet("faults", config("redis", server.url, "bench-faults:"), upstream.url(0),
                      duration)  # fmt: skip
        start_at = _start([fleet])
        upstream.schedule(start_at, [[Phase(0, 0.0), Phase(down_at, 1.0)]])
        returned: dict[str, float] = {}

        def at(offset: float) -> None:
            delay = start_at + offset - time.monotonic()
            if delay > 0:
                time.sleep(delay)

        at(kill_at)
        server.kill()
        at(restart_at)
        server.start()
        returned["restart"] = time.time()
        at(pause_at)
        server.pause()
        at(resume_at)
        server.resume()
        returned["resume"] = time.time()
        calls, healths, events = fleet.results()
        hits = upstream.collect()
    monotonic_down = start_at + down_at
    before_down = [c for c in calls if c.at < monotonic_down - 0.05]
    errors = Counter(c.outcome for c in before_down if c.outcome != "ok")
    after_errors = Counter(
        c.outcome
        for c in calls
        if c.at >= monotonic_down and c.outcome not in ("503", "fail_fast", "ok")
    )
    per_worker = []
    for worker_events in events:
        names = [e["event"] for e in worker_events if e["event"].startswith("state.")]
        restored_at = [
            _epoch(e["timestamp"]) for e in worker_events if e["event"] == "state.restored"
        ]
        per_worker.append((names, restored_at))
    lags: dict[str, list[float]] = {"restart": [], "resume": []}
    for _names, restored_at in per_worker:
        for key, back in returned.items():
            after = [t - back for t in restored_at if t >= back - 0.5]
            if after:
                lags[key].append(min(after))
    down_hits = [hit for hit in hits if hit.at >= monotonic_down]
    return {
        "calls": len(before_down),
        "errors": dict(errors),
        "after_errors": dict(after_errors),
        "events": [names for names, _ in per_worker],
        "lags": lags,
        "tries_after": len(down_hits),
        "open": sum(1 for health in healths for h in health.values() if h["breaker"] == "open"),
    }


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# -- report -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter phases, fewer rounds")
    parser.add_argument("--only", choices=("outage", "push", "cost", "faults"))
    parser.add_argument(
        "--mode",
        choices=(*PUSH_MODES, "both"),
        default="both",
        help="the Redis the push part runs on: the one redis-server, a Redis Cluster of "
        f"{CLUSTER_MASTERS} masters, or both in turn (default); the other parts run on the "
        "one redis-server",
    )
    args = parser.parse_args(argv)
    modes = PUSH_MODES if args.mode == "both" else (args.mode,)
    plan = QUICK if args.quick else FULL
    print(
        f"# fleet.py{' --quick' if args.quick else ''}: {WORKERS} workers x {THREADS} threads "
        f"at {RATE:g} calls/s each; failure_threshold {THRESHOLD}, sync_interval_ms "
        f"{INTERVAL_MS}, timeout_ms {TIMEOUT_MS}"
    )
    print(
        f"# {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores; requests {version('requests')}, redis-py {version('redis')}"
    )
    holds = []
    # The workers, the upstream and whatever else runs here share 2 cores; a Redis of its own
    # would have a core to itself, so it gets the scheduler's priority instead (when root).
    niceness = -10 if os.geteuid() == 0 else None
    with RedisServer(niceness=niceness) as server:
        print(
            f"# redis-server on 127.0.0.1:{server.port}, started by the benchmark, niceness "
            f"{niceness if niceness is not None else 0}; load average before: "
            f"{os.getloadavg()[0]:.1f}"
        )
        if args.only in (None, "outage"):
            rows = outage(plan, server.url)
            print("\n## Outage: tries before every worker fails fast\n")
            print(
                table(
                    [
                        "backend",
                        "tries in the outage",
                        "of them retries",
                        "calls in it",
                        "every worker failing fast after",
                        "breakers open",
                        "caller errors",
                    ],
                    [
                        [
                            name,
                            r["tries"],
                            r["retries"],
                            r["outage_calls"],
                            f"{r['all_fail_fast_after']:.2f} s",
                            f"{r['open']}/{WORKERS}",
                            sum(r["errors"].values()),
                        ]
                        for name, r in rows.items()
                    ],
                )
            )
            redis_row, memory_row = rows["redis"], rows["memory"]
            ok_tries = redis_row["tries"] <= 2 * THRESHOLD
            # One budget: 10 tokens, 0.2 per call started in the outage, 1 per second.
            budget = 10 + 0.2 * redis_row["outage_calls"] + plan.outage
            ok_budget = redis_row["retries"] <= budget
            print(
                f"\nredis: {redis_row['tries']} tries <= 2 x failure_threshold = "
                f"{2 * THRESHOLD}: {verdict(ok_tries)}; memory: {memory_row['tries']} "
                f"({memory_row['tries'] / THRESHOLD:.1f} x failure_threshold)"
            )
            print(
                f"redis: {redis_row['retries']} retries within one budget "
                f"(10 tokens + 0.2 x {redis_row['outage_calls']} calls + 1/s x "
                f"{plan.outage:g} s = {budget:.0f}): {verdict(ok_budget)}; memory: "
                f"{memory_row['retries']} retries from {WORKERS} budgets"
            )
            holds += [ok_tries, ok_budget]
        if args.only in (None, "push"):
            holds.append(_push(plan.push, server.url, modes, niceness))
        if args.only in (None, "cost"):
            result = cost(plan, server.url)
            print("\n## Healthy host: the redis backend's cost per call\n")
            print(
                table(
                    ["backend", "median per call"],
                    [
                        ["memory", f"{result['memory_us']:.2f} us"],
                        ["redis", f"{result['redis_us']:.2f} us"],
                    ],
                )
            )
            ok_cost = result["added_us"] <= 20 and not result["degraded"]
            print(
                f"\nadded per call, median of {plan.rounds} interleaved pairs of "
                f"{plan.batch}-call batches: {result['added_us']:+.2f} us (ratio "
                f"{result['ratio']:.3f}) <= 20 us: {verdict(ok_cost)}"
            )
            holds.append(ok_cost)
        if args.only in (None, "faults"):
            result = faults(plan, server)
            print(
                f"\n## Redis killed {plan.down:g} s, restarted, paused {plan.down:g} s, resumed\n"
            )
            expected = ["state.degraded", "state.restored"] * 2
            good = sum(names == expected for names in result["events"])
            print(
                table(
                    ["measure", "value"],
                    [
                        ["calls before the upstream went down", result["calls"]],
                        ["caller errors among them", sum(result["errors"].values())],
                        [
                            "workers logging degraded, restored, degraded, restored",
                            f"{good}/{WORKERS}",
                        ],
                        [
                            "restored after the restart (max over workers)",
                            _ms(result["lags"]["restart"]),
                        ],
                        [
                            "restored after SIGCONT (max over workers)",
                            _ms(result["lags"]["resume"]),
                        ],
                        ["tries once the upstream went down, after it all", result["tries_after"]],
                        ["breakers open at the end", f"{result['open']}/{WORKERS}"],
                    ],
                )
            )
            if result["errors"]:
                print(f"errors: {result['errors']}")
            odd = [names for names in result["events"] if names != expected]
            if odd:
                print(f"workers with other event sequences: {odd}")
            lag_max = max(result["lags"]["restart"] + result["lags"]["resume"], default=math.inf)
            ok_errors = not result["errors"] and not result["after_errors"]
            ok_events = good == WORKERS
            ok_back = lag_max <= (INTERVAL_MS + TIMEOUT_MS) / 1000
            ok_protect = result["tries_after"] <= 2 * THRESHOLD
            print(
                f"\nzero caller errors: {verdict(ok_errors)}; one degraded and one restored per "
                f"worker per outage: {verdict(ok_events)}; back within one sync interval "
                f"(+ one {TIMEOUT_MS} ms command timeout) of Redis returning: "
                f"{verdict(ok_back)}; protection after it all, {result['tries_after']} tries "
                f"<= {2 * THRESHOLD}: {verdict(ok_protect)}"
            )
            holds += [ok_errors, ok_events, ok_back, ok_protect]
    return 0 if all(holds) else 1


def _push(plan: PushPlan, redis_url: str, modes: tuple[str, ...], niceness: int | None) -> bool:
    """The push part: one row per Redis and fleet size; whether the target held in every
    round of each."""
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    about = []
    for mode in modes:
        if mode == "single":
            for workers in PUSH_FLEETS:
                prefix = f"bench-push-{workers}:"
                results[mode, workers] = measure_push(plan, redis_url, mode, workers, prefix)
            continue
        with RedisClusterNodes(
            masters=CLUSTER_MASTERS,
            replicas=CLUSTER_REPLICAS,
            node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS,
            niceness=niceness,
        ) as cluster:
            ports = ", ".join(str(node.port) for node in cluster.nodes)
            about.append(
                f"cluster: {CLUSTER_MASTERS} masters, replicas per master {CLUSTER_REPLICAS}, "
                f"on 127.0.0.1:{ports}, started by the benchmark, niceness "
                f"{niceness if niceness is not None else 0}, cluster-node-timeout "
                f"{CLUSTER_NODE_TIMEOUT_MS} ms; the workers' url: {cluster.url}"
            )
            channels = []
            for workers in PUSH_FLEETS:
                prefix = f"bench-push-{workers}:"
                results[mode, workers] = measure_push(plan, cluster.url, mode, workers, prefix)
                # Where the workers subscribe: the master of the channel's slot. A host's
                # opening is published on the master of the host's slot, and crosses the
                # cluster bus to them from any other.
                channel = f"{prefix}openings"
                channels.append(f"{channel} on {cluster.master_of(channel).port}")
            keys = ", ".join(f"{node.port}: {node.command('DBSIZE')}" for node in cluster.nodes)
            about.append(
                f"cluster: the fleets' keys per master after the run ({keys}); the openings "
                f"channels, every worker subscribed on its master: {', '.join(channels)}"
            )
    print(
        f"\n## Push: tries after the fleet's first opening, failure_threshold {PUSH_THRESHOLD}, "
        f"{plan.rounds} rounds\n"
    )
    for line in about:
        print(line)
    if about:
        print()

    def each(rows: list[dict[str, Any]], name: str) -> str:
        return " ".join(str(row[name]) for row in rows)

    print(
        table(
            [
                "redis",
                "workers",
                "sent after it, per round",
                "most",
                "in flight at it, per round",
                "tries before it",
                "every worker open after it (max)",
                "caller errors",
                "load average after",
            ],
            [
                [
                    mode,
                    workers,
                    each(rows, "sent_after"),
                    max(row["sent_after"] for row in rows),
                    each(rows, "in_flight"),
                    each(rows, "before"),
                    f"{max(row['all_open_after'] for row in rows) * 1000:.1f} ms",
                    sum(row["errors"] for row in rows),
                    f"{rows[0]['load']:.1f}",
                ]
                for (mode, workers), rows in results.items()
            ],
        )
    )
    worst = max(row["sent_after"] for rows in results.values() for row in rows)
    every_open = all(
        row["open"] == workers for (_, workers), rows in results.items() for row in rows
    )
    ok = worst <= 2 and every_open
    print(
        f"\nat most 2 tries sent after the fleet's first opening, in every round at "
        f"{' and '.join(map(str, PUSH_FLEETS))} workers on {' and '.join(modes)} "
        f"(most: {worst}), every worker open: {verdict(ok)}"
    )
    return ok


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{max(values) * 1000:.0f} ms (median {statistics.median(values) * 1000:.0f} ms)"


if __name__ == "__main__":
    sys.exit(main())
