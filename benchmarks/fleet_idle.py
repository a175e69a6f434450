"""Fleet state with many idle hosts: what the sync thread costs, and what it does to calls.

A service that calls hosts its users choose (webhooks) holds many hosts it called once and
may never call again. One process, one redis-backed ResilientSession with the defaults
(sync_interval_ms 100, timeout_ms 20, registry.max_hosts 10,000), against a redis-server the
benchmark starts on a free loopback port (never the machine's).

  sync    the session calls each of N hosts once (a canned transport: no network, no name
          lookup), then leaves them; after a settling time, over a window: each sync's
          duration (median, 95th percentile, longest), the process's CPU (time.process_time,
          every thread: the main one only sleeps, so this is the sync thread and redis-py) and
          redis-server's (INFO cpu) as a share of one core, EVALSHA calls per sync (INFO
          commandstats), and whether the backend ended degraded or logged state.degraded.
  calls   four threads call a loopback upstream (a process of its own) at 25 calls/s each,
          with no other host held, then with 1,000 idle hosts held: the calls' latency.
  churn   10,000 idle hosts held, and a new host called every 50 ms (the registry full, so
          each evicts one): the process's CPU and whether the backend degraded.

Usage (from the project root, the project installed with the redis extra):
  python benchmarks/fleet_idle.py                       # every part, 10 to 10,000 hosts
  python benchmarks/fleet_idle.py --only sync --hosts 1000 --window 5
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import _repo_root  # noqa: F401 - devservers/ on sys.path
import redis
from _common import canned_transport, table, verdict
from _upstream import Upstream
from devservers import RedisServer

from resilient_session import ResilientSession, log_json_lines

HOSTS = (10, 100, 1_000, 10_000)
SETTLE = 3.0  # seconds between the hosts' one call and the window: every host idle by then
WINDOW = 10.0
THREADS = 4
RATE = 25.0  # calls per second per thread, as benchmarks/fleet.py
IDLE_FOR_CALLS = 1_000
CHURN_HELD = 10_000
CHURN_EVERY = 0.05


def config(url: str, prefix: str) -> dict[str, Any]:
    return {"state": {"backend": "redis", "url": url, "key_prefix": prefix}}


def _hold_idle(session: ResilientSession, count: int) -> None:
    """Call each of *count* hosts once, through a canned transport, and leave them."""
    with canned_transport():
        for number in range(count):
            session.get(f"http://h{number}.idle.test/")


def _timed_syncs(session: ResilientSession) -> list[float]:
    """Wrap the session's sync so each one's duration (seconds) is appended to the list."""
    backend: Any = session.registry.backend
    durations: list[float] = []
    inner: Callable[[], None] = backend.sync

    def timed() -> None:
        began = time.perf_counter()
        inner()
        durations.append(time.perf_counter() - began)

    backend.sync = timed
    return durations


def _server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def sync(count: int, server: RedisServer, window: float, events: io.StringIO) -> dict[str, Any]:
    client = redis.Redis.from_url(server.url)
    session = ResilientSession(config(server.url, f"bench-idle-{count}:"))
    session.trust_env = False
    try:
        _hold_idle(session, count)
        time.sleep(SETTLE)
        durations = _timed_syncs(session)
        events.seek(0)
        events.truncate()
        evalsha, server_cpu = _evalsha_calls(client), _server_cpu(client)
        cpu, began = time.process_time(), time.perf_counter()
        time.sleep(window)
        cpu, elapsed = time.process_time() - cpu, time.perf_counter() - began
        server_cpu = _server_cpu(client) - server_cpu
        evalsha = _evalsha_calls(client) - evalsha
        syncs = list(durations)
        degraded_events = sum(
            json.loads(line)["event"] == "state.degraded"
            for line in events.getvalue().splitlines()
            if line
        )
        return {
            "hosts": count,
            "syncs": len(syncs),
            "median_ms": statistics.median(syncs) * 1000 if syncs else float("nan"),
            "p95_ms": _quantile(syncs, 0.95) * 1000,
            "max_ms": max(syncs, default=float("nan")) * 1000,
            "cpu": cpu / elapsed,
            "server_cpu": server_cpu / elapsed,
            "evalsha_per_sync": evalsha / max(1, len(syncs)),
            "degraded": session.registry.backend.degraded,
            "degraded_events": degraded_events,
        }
    finally:
        session.close()
        client.close()


def calls(idle: int, server: RedisServer, upstream: Upstream, window: float) -> dict[str, Any]:
    session = ResilientSession(config(server.url, f"bench-calls-{idle}:"))
    session.trust_env = False
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    try:
        _hold_idle(session, idle)
        session.get(upstream.url(0), timeout=(1.0, 5.0))
        time.sleep(SETTLE)
        start_at = time.monotonic() + 0.1

        def run(thread: int) -> None:
            period = 1 / RATE
            for number in range(int(window * RATE) + 1):
                due = start_at + (number + thread / THREADS) * period
                if due - start_at >= window:
                    return
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                began = time.perf_counter()
                try:
                    session.get(upstream.url(0), timeout=(1.0, 5.0))
                except Exception as exc:  # noqa: BLE001 - every error is counted
                    with lock:
                        errors.append(type(exc).__name__)
                    continue
                with lock:
                    latencies.append(time.perf_counter() - began)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(window + 30)
        degraded = session.registry.backend.degraded
    finally:
        session.close()
    return {
        "idle": idle,
        "calls": len(latencies),
        "errors": len(errors),
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": _quantile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
        "degraded": degraded,
    }


def churn(server: RedisServer, window: float) -> dict[str, Any]:
    session = ResilientSession(config(server.url, "bench-churn:"))
    session.trust_env = False
    try:
        _hold_idle(session, CHURN_HELD)
        time.sleep(SETTLE)
        cpu, began = time.process_time(), time.perf_counter()
        added = 0
        with canned_transport():
            while time.perf_counter() - began < window:
                session.get(f"http://new{added}.churn.test/")
                added += 1
                time.sleep(CHURN_EVERY)
        cpu, elapsed = time.process_time() - cpu, time.perf_counter() - began
        return {
            "added": added,
            "cpu": cpu / elapsed,
            "degraded": session.registry.backend.degraded,
        }
    finally:
        session.close()


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("sync", "calls", "churn"))
    parser.add_argument("--hosts", default=",".join(map(str, HOSTS)), help="e.g. 10,1000")
    parser.add_argument("--window", type=float, default=WINDOW, help="seconds measured")
    args = parser.parse_args(argv)
    events = io.StringIO()
    log_json_lines(events, level=logging.WARNING)
    print(
        f"# fleet_idle.py: sync_interval_ms 100, timeout_ms 20; {args.window:g} s windows "
        f"after {SETTLE:g} s idle"
    )
    print(
        f"# {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores; redis-py {version('redis')}; load average before: "
        f"{os.getloadavg()[0]:.1f}"
    )
    holds = []
    with RedisServer() as server:
        if args.only in (None, "sync"):
            rows = [sync(int(n), server, args.window, events) for n in args.hosts.split(",") if n]
            print("\n## One sync with N idle hosts held\n")
            print(
                table(
                    [
                        "idle hosts",
                        "syncs",
                        "sync median",
                        "p95",
                        "longest",
                        "EVALSHA per sync",
                        "process CPU",
                        "redis-server CPU",
                        "degraded",
                    ],
                    [
                        [
                            f"{r['hosts']:,}",
                            r["syncs"],
                            f"{r['median_ms']:.1f} ms",
                            f"{r['p95_ms']:.1f} ms",
                            f"{r['max_ms']:.1f} ms",
                            f"{r['evalsha_per_sync']:.1f}",
                            f"{r['cpu']:.1%}",
                            f"{r['server_cpu']:.1%}",
                            f"{'yes' if r['degraded'] else 'no'} ({r['degraded_events']} events)",
                        ]
                        for r in rows
                    ],
                )
            )
            thousand = [r for r in rows if r["hosts"] == 1_000]
            if thousand:
                row = thousand[0]
                ok = row["cpu"] < 0.10 and not row["degraded"] and not row["degraded_events"]
                print(
                    f"\n1,000 idle hosts: {row['cpu']:.1%} of a core < 10 %, not degraded: "
                    f"{verdict(ok)}"
                )
                holds.append(ok)
        if args.only in (None, "calls"):
            with Upstream(stacks=1) as upstream:
                results = [
                    calls(idle, server, upstream, args.window) for idle in (0, IDLE_FOR_CALLS)
                ]
            print(f"\n## Calls to a loopback upstream, {THREADS} threads x {RATE:g} calls/s\n")
            print(
                table(
                    ["idle hosts held", "calls", "errors", "p50", "p99", "longest", "degraded"],
                    [
                        [
                            f"{r['idle']:,}",
                            r["calls"],
                            r["errors"],
                            f"{r['p50_ms']:.2f} ms",
                            f"{r['p99_ms']:.2f} ms",
                            f"{r['max_ms']:.2f} ms",
                            "yes" if r["degraded"] else "no",
                        ]
                        for r in results
                    ],
                )
            )
            none, held = results
            ok = held["p99_ms"] <= 2 * none["p99_ms"] and not held["errors"]
            print(
                f"\np99 with {IDLE_FOR_CALLS:,} idle hosts {held['p99_ms']:.2f} ms <= 2 x "
                f"{none['p99_ms']:.2f} ms: {verdict(ok)}"
            )
            holds.append(ok)
        if args.only in (None, "churn"):
            result = churn(server, args.window)
            print(
                f"\n## {CHURN_HELD:,} idle hosts held, a new host every {CHURN_EVERY * 1000:.0f} ms"
                f"\n\n{result['added']} hosts added in {args.window:g} s: process CPU "
                f"{result['cpu']:.1%}, degraded: {'yes' if result['degraded'] else 'no'}"
            )
    return 0 if all(holds) else 1


if __name__ == "__main__":
    sys.exit(main())
