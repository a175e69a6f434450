"""The push channel under a flood: what messages that are no opening for a host a worker holds
cost that worker's calls.

Anyone who may PUBLISH on ``<key_prefix>openings`` can fill it. One process, one redis-backed
ResilientSession on the defaults, four threads calling a loopback upstream (a process of its
own, answering after 4 ms, so that the calls wait on it rather than on the cores) back to
back for a window; beside it, in a process of its own, one publisher sends on the
session's channel as fast as one connection can, one PUBLISH per round trip. The benchmark
starts its own redis-server on a free loopback port (never the machine's). Rows:

  quiet         nobody publishes;
  elsewhere     junk, on another prefix's channel: what the publisher and Redis take of the
                machine's cores, and nothing reaches the worker (on a machine with cores to
                spare, the same as quiet);
  junk          every message is junk (no ``<generation>:<ms>:<host>``);
  other hosts   every message is a well-formed opening, of a host the worker does not hold.

Measured per row: the calls the four threads made in the window, their median and 99th
percentile latency, the share of the window each thread's tries spent held at the listener's
socket (the look before each try, timed; the most of the four), and the messages published
meanwhile. The target: a flood costs the calls
at most a few percent beyond what the publisher takes of the machine (calls within 5 % of
elsewhere's, p50 within 10 %). The listener parses every message in the worker's process,
so a flood also costs the worker the interpreter time that takes.

Usage (from the project root, the project installed with the redis extra):
  python benchmarks/push_flood.py                    # 4 s windows, each row once
  python benchmarks/push_flood.py --window 4 --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import threading
import time
from importlib.metadata import version
from multiprocessing.connection import Connection
from typing import Any

import _repo_root  # noqa: F401 - devservers/ on sys.path
import redis
from _common import table, verdict
from _upstream import Phase, Upstream
from devservers import RedisServer

from resilient_session import ResilientSession

PREFIX = "bench-flood:"
THREADS = 4
WINDOW = 4.0
ROWS = ("quiet", "elsewhere", "junk", "other hosts")
LATENCY = 0.004  # seconds the upstream takes to answer
# Every process here (this one, the upstream, the publisher, redis-server) would have a core of
# its own in production; on a shared machine they get the scheduler's priority instead (when
# root), as in benchmarks/fleet.py, so that what is measured is what the flood does to them.
NICENESS = -10 if os.geteuid() == 0 else None
SETTLE = 0.5  # seconds of flood before the window: the listener is in it when calls are timed


def _publish(url: str, channel: str, kind: str, seconds: float, conn: Connection) -> None:
    """In a process of its own: PUBLISH on *channel* as fast as one connection can, for
    *seconds*; sends back how many were published."""
    client = redis.Redis.from_url(url)
    message = b"1700000000000:30000:http://elsewhere.test:80" if kind == "other hosts" else b"junk"
    if kind == "elsewhere":
        channel = "bench-flood-elsewhere:openings"
    sent = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        client.publish(channel, message)
        sent += 1
    client.close()
    conn.send(sent)


def measure(kind: str, server: RedisServer, upstream: Upstream, window: float) -> dict[str, Any]:
    """One row: the session's calls over *window* seconds, with the publisher of *kind*."""
    session = ResilientSession(
        {"state": {"backend": "redis", "url": server.url, "key_prefix": PREFIX}}
    )
    session.trust_env = False
    url = upstream.url(0)
    latencies: list[list[float]] = [[] for _ in range(THREADS)]
    held = [0.0] * THREADS
    caller = threading.local()
    errors = 0
    publisher = None
    receiver: Connection | None = None
    try:
        admin = redis.Redis.from_url(server.url)
        channel = f"{PREFIX}openings"
        session.get(url, timeout=(1.0, 5.0))
        breaker: Any = session.registry.for_url(url).breaker
        look = breaker.heed

        def timed_look() -> None:
            began = time.perf_counter()
            look()
            held[caller.index] += time.perf_counter() - began

        breaker.heed = timed_look
        until = time.monotonic() + 5.0
        while not admin.pubsub_numsub(channel)[0][1] and time.monotonic() < until:
            time.sleep(0.01)
        admin.close()
        if kind != "quiet":
            context = multiprocessing.get_context("spawn")
            receiver, sender = context.Pipe(duplex=False)
            publisher = context.Process(
                target=_publish,
                args=(server.url, channel, kind, SETTLE + window + 1.0, sender),
                daemon=True,
            )
            publisher.start()
            sender.close()
        time.sleep(SETTLE)
        ends_at = time.monotonic() + window

        def run(index: int) -> None:
            nonlocal errors
            caller.index = index
            took = latencies[index]
            while True:
                began = time.monotonic()
                if began >= ends_at:
                    return
                try:
                    session.get(url, timeout=(1.0, 5.0))
                except Exception:  # noqa: BLE001 - counted, and shown
                    errors += 1
                took.append(time.monotonic() - began)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(window + 30.0)
        published = 0
        if publisher is not None and receiver is not None:
            publisher.join(30.0)
            published = receiver.recv() if receiver.poll(5.0) else -1
    finally:
        if publisher is not None and publisher.is_alive():
            publisher.terminate()
            publisher.join(5.0)
        session.close()
    every = sorted(value for took in latencies for value in took)
    return {
        "kind": kind,
        "calls": len(every),
        "p50": statistics.median(every) if every else float("nan"),
        "p99": every[min(len(every) - 1, int(0.99 * len(every)))] if every else float("nan"),
        "held": max(held) / window,
        "errors": errors,
        "published": published,
        "load": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=WINDOW, help="seconds measured")
    parser.add_argument("--rounds", type=int, default=1, help="each row this many times")
    args = parser.parse_args(argv)
    print(
        f"# push_flood.py: {THREADS} threads back to back on an upstream answering after "
        f"{LATENCY * 1000:g} ms, {args.window:g} s windows"
    )
    print(
        f"# {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores; redis-py {version('redis')}; niceness "
        f"{NICENESS if NICENESS is not None else 0}; load average before: "
        f"{os.getloadavg()[0]:.1f}"
    )
    if NICENESS is not None:
        # Before any thread or process starts: each inherits it.
        os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
    rows: list[dict[str, Any]] = []
    with RedisServer() as server, Upstream() as upstream:
        upstream.schedule(time.monotonic(), [[Phase(0.0, 0.0, latency=LATENCY)]], record=False)
        for _ in range(args.rounds):
            rows += [measure(kind, server, upstream, args.window) for kind in ROWS]
    print()
    print(
        table(
            [
                "publisher",
                "calls",
                "p50",
                "p99",
                "held",
                "errors",
                "published",
                "load average after",
            ],
            [
                [
                    r["kind"],
                    f"{r['calls']:,}",
                    f"{r['p50'] * 1000:.2f} ms",
                    f"{r['p99'] * 1000:.2f} ms",
                    f"{r['held']:.1%}",
                    r["errors"],
                    f"{r['published']:,}",
                    f"{r['load']:.1f}",
                ]
                for r in rows
            ],
        )
    )

    def medians(kind: str) -> tuple[float, float]:
        mine = [r for r in rows if r["kind"] == kind]
        return statistics.median(r["calls"] for r in mine), statistics.median(
            r["p50"] for r in mine
        )

    calls_quiet, p50_quiet = medians("quiet")
    calls_floor, p50_floor = medians("elsewhere")
    print(
        f"\nelsewhere (the publisher's share of the machine): calls "
        f"{calls_floor / calls_quiet:.1%} of quiet's, p50 {p50_floor / p50_quiet:.1%}"
    )
    holds = []
    for kind in ROWS[2:]:
        calls, p50 = medians(kind)
        ok = calls >= 0.95 * calls_floor and p50 <= 1.10 * p50_floor
        holds.append(ok)
        print(
            f"{kind}: calls {calls / calls_quiet:.1%} of quiet's, {calls / calls_floor:.1%} "
            f"of elsewhere's (>= 95 %); p50 {p50 / p50_quiet:.1%} of quiet's, "
            f"{p50 / p50_floor:.1%} of elsewhere's (<= 110 %): {verdict(ok)}"
        )
    return 0 if all(holds) else 1


if __name__ == "__main__":
    sys.exit(main())
