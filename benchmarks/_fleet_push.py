"""The push part of benchmarks/fleet.py: a fleet of worker processes at failure_threshold 5 on
a host that goes down, round after round; the tries the host sees after the fleet's first
opening, before every worker fails fast.

Each round has a host of its own (one port of the upstream), healthy for ``warmup`` seconds
and then answering only 503 for ``down`` seconds, so each round starts from closed breakers
on every worker. Every worker records, on one clock (``time.monotonic()``, shared by every
process on Linux), each try it sent (a try hook) and each change of its breakers (a state
hook); the upstream records each try it received. Per round:

- the fleet's first opening: the earliest change to open of any worker's breaker for the
  round's host;
- in flight then: tries sent before it that had not reached the upstream yet;
- sent after it: tries that left a worker after it (the target: at most 2);
- every worker open: the last worker's change to open, after the first.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from _upstream import CALL_ID_HEADER, Phase, Upstream

from resilient_session import CircuitOpenError, ResilientSession

THRESHOLD = 5
THREADS = 4  # per worker, as in the outage part
RATE = 25.0  # calls per second per worker
RETRY = {"backoff_base": 0.05, "backoff_cap": 0.5}
GAP = 0.4  # seconds between one round's end and the next round's start
# The workers and the upstream would each have cores of their own in production; on a shared
# machine they get the scheduler's priority instead (when root), as the redis-server does.
NICENESS = -10 if os.geteuid() == 0 else None


@dataclass(frozen=True)
class PushPlan:
    rounds: int
    warmup: float
    down: float

    @property
    def span(self) -> float:
        return self.warmup + self.down + GAP


def config(url: str, prefix: str, mode: str) -> dict[str, Any]:
    """The defaults but for failure_threshold 5, short backoff waits and openings that
    outlast the run (so every try after them is one the breaker let through), on the Redis
    *mode* names (``single`` or ``cluster``) at *url*."""
    return {
        "defaults": {
            "retry": RETRY,
            "breaker": {"failure_threshold": THRESHOLD, "recovery_timeout": 60.0},
        },
        "state": {"backend": "redis", "mode": mode, "url": url, "key_prefix": prefix},
    }


class _Recorder:
    """Each try sent and each breaker change, on time.monotonic()."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []
        self.opened: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def on_try(self, record: Any, /) -> None:
        if record.refused is None:
            with self._lock:
                self.sent.append((record.started, record.host))

    def on_transition(self, change: Any, /) -> None:
        if change.to_state.value == "open":
            at = time.monotonic()
            with self._lock:
                self.opened.append((at, change.host))


def _worker(
    conn: Connection, index: int, cfg: dict[str, Any], urls: list[str], plan: PushPlan
) -> None:
    """Say ready, get the start instant, then in round r call ``urls[r]`` at RATE calls/s from
    THREADS threads while its host is up and then down; send back what was recorded."""
    if NICENESS is not None:
        os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
    recorder = _Recorder()
    session = ResilientSession(cfg, try_hooks=[recorder])
    conn.send("ready")
    start_at: float = conn.recv()
    errors: list[str] = []

    def run(thread: int) -> None:
        period = THREADS / RATE
        for round_number, url in enumerate(urls):
            began = start_at + round_number * plan.span
            number = 0
            while True:
                offset = (number + (thread + index / 64) / THREADS) * period
                if offset >= plan.warmup + plan.down:
                    break
                delay = began + offset - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                call_id = ((round_number * 64 + index) * THREADS + thread) * 10_000 + number
                try:
                    session.get(url, headers={CALL_ID_HEADER: str(call_id)}, timeout=(1.0, 5.0))
                except CircuitOpenError:
                    pass
                except Exception as exc:  # noqa: BLE001 - every other error is counted
                    errors.append(type(exc).__name__)
                number += 1

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(plan.rounds * plan.span + 60)
    session.close()
    conn.send((recorder.sent, recorder.opened, errors))
    conn.close()


def measure(
    plan: PushPlan, redis_url: str, mode: str, workers: int, prefix: str
) -> list[dict[str, Any]]:
    """One fleet of *workers* processes on the Redis of *mode* at *redis_url* through *plan*'s
    rounds; one row per round."""
    context = multiprocessing.get_context("spawn")
    with Upstream(stacks=plan.rounds) as upstream:
        if NICENESS is not None and upstream.pid is not None:
            os.setpriority(os.PRIO_PROCESS, upstream.pid, NICENESS)
        urls = [upstream.url(r) for r in range(plan.rounds)]
        conns, processes = [], []
        for index in range(workers):
            parent, child = context.Pipe()
            process = context.Process(
                target=_worker,
                args=(child, index, config(redis_url, prefix, mode), urls, plan),
                daemon=True,
            )
            process.start()
            child.close()
            conns.append(parent)
            processes.append(process)
        for conn in conns:
            if not conn.poll(120) or conn.recv() != "ready":
                raise RuntimeError("a worker did not start")
        start_at = time.monotonic() + 0.5
        upstream.schedule(
            start_at,
            [[Phase(0, 0.0), Phase(r * plan.span + plan.warmup, 1.0)] for r in range(plan.rounds)],
        )
        for conn in conns:
            conn.send(start_at)
        sent: list[tuple[float, str]] = []
        opened: list[list[tuple[float, str]]] = []
        errors: list[str] = []
        for conn in conns:
            if not conn.poll(plan.rounds * plan.span + 120):
                raise RuntimeError("a worker did not report")
            worker_sent, worker_opened, worker_errors = conn.recv()
            sent += worker_sent
            opened.append(worker_opened)
            errors += worker_errors
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.terminate()
        hits = upstream.collect()
        hosts = [f"http://127.0.0.1:{port}" for port in upstream.ports]
    # Each fleet's 1-minute load average as its last round ends: the CPU the workers competed
    # for, printed beside its rows.
    load = os.getloadavg()[0]
    rows = []
    for round_number, host in enumerate(hosts):
        firsts = [min((at for at, h in worker if h == host), default=math.nan) for worker in opened]
        known = [at for at in firsts if not math.isnan(at)]
        first = min(known, default=math.nan)
        arrived = [hit.at for hit in hits if hit.stack == round_number]
        down_at = start_at + round_number * plan.span + plan.warmup
        left = [at for at, h in sent if h == host]
        sent_before = sum(1 for at in left if at <= first)
        arrived_before = sum(1 for at in arrived if at <= first)
        rows.append(
            {
                "round": round_number + 1,
                "before": sum(1 for at in arrived if down_at <= at <= first),
                "in_flight": max(0, sent_before - arrived_before),
                "sent_after": sum(1 for at in left if at > first),
                "arrived_after": sum(1 for at in arrived if at > first),
                "all_open_after": (max(known) - first) if len(known) == workers else math.nan,
                "open": len(known),
                "errors": len(errors) if round_number == 0 else 0,
                "load": load,
            }
        )
    return rows
