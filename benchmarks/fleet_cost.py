"""Fleet state: what each worker costs the Redis, by workers, hosts held, idle or in use.

Sessions stand for worker processes: each is one redis-backed ResilientSession on the
defaults (sync_interval_ms 100, timeout_ms 20), four to a process, every session holding the
same hosts (the upstreams a service's workers share). The benchmark starts its own
redis-server on a free loopback port (never the machine's) and, for each number of sessions,
adds hosts to every session (1, then 50, then 500) and measures a window of each state:

  in use    a try recorded on each host's guards every sync interval, as the stages record a
            call's successful try (a deposit, the breaker's admission and result, the
            throttle's count): every sync sends every host's batch
  1 in use  the same on one host, the others idle: a worker holding many hosts (webhooks)
            of which it calls few
  idle      no try for longer than a host stays in use (a second): no sync sends the host

Measured over each window, per session per second: round trips to Redis (each write of one
or more commands, counted in redis-py's connection), commands (INFO commandstats: the
scripts' calls, the commands the scripts run, PING and SUBSCRIBE; INFO itself left out) and
Redis CPU (INFO cpu: used_cpu_user + used_cpu_sys, less the server's own idle cost, measured
with no session before), and whether any session ended degraded.

Usage (from the project root, the project installed with the redis extra):
  python benchmarks/fleet_cost.py                        # 8, 16, 32 sessions; 1, 50, 500 hosts
  python benchmarks/fleet_cost.py --sessions 8 --hosts 1,50 --window 3
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import sys
import threading
import time
from importlib.metadata import version
from multiprocessing.connection import Connection
from typing import Any

import _repo_root  # noqa: F401 - devservers/ on sys.path
import redis
from _common import table, verdict
from devservers import RedisServer
from redis.connection import AbstractConnection

from resilient_session import ResilientSession
from resilient_session._state.breaker import TryResult

SESSIONS = (8, 16, 32)
HOSTS = (1, 50, 500)
PER_PROCESS = 4
WINDOW = 5.0
INTERVAL = 0.1  # the default sync_interval_ms
# A host stays in use for a second after its last try (at least 3 sync intervals), counted
# from the sync that sent it: idle well after that.
IDLE_AFTER = 2.5
# In use at 500 hosts, 16 and 32 sessions need more CPU than this 2-core machine has for
# the sessions alone (tries and syncs): measured up to this many sessions.
IN_USE_500_UP_TO = 8


# -- worker processes ------------------------------------------------------------------------


def _count_round_trips() -> list[int]:
    """Count every write of commands to Redis from this process: one per round trip."""
    counter = [0]
    send = AbstractConnection.send_packed_command

    def counted(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        counter[0] += 1
        send(self, command, check_health)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    return counter


def _try(state: Any) -> None:
    """A call's successful try on the host's guards, as the stages record it."""
    state.bucket.deposit()
    permit, _ = state.breaker.closed_admission or state.breaker.allow()
    if permit is not None:
        state.breaker.record(permit, TryResult.SUCCESS)
    if state.throttle is not None:
        state.throttle.record(True)


def _worker(conn: Connection, count: int, url: str, prefix: str) -> None:
    """*count* sessions; then, on the parent's word, hosts added, tries started or stopped,
    counts reported, until told to stop."""
    round_trips = _count_round_trips()
    config = {"state": {"backend": "redis", "url": url, "key_prefix": prefix}}
    sessions = [ResilientSession(config) for _ in range(count)]
    held: list[list[Any]] = [[] for _ in sessions]
    # How many hosts of each session get a try every interval.
    using = [0]
    stop = threading.Event()

    def drive() -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            for states in held:
                for state in states[: using[0]]:
                    _try(state)
            next_at += INTERVAL
            stop.wait(max(0.0, next_at - time.monotonic()))

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    conn.send("ready")
    while True:
        kind, *args = conn.recv()
        if kind == "hosts":
            for session, states in zip(sessions, held, strict=True):
                for number in range(len(states), args[0]):
                    states.append(session.registry.for_url(f"http://h{number}.cost.test/"))
            conn.send("ok")
        elif kind == "use":
            using[0] = args[0]
            conn.send("ok")
        elif kind == "count":
            degraded = any(session.registry.backend.degraded for session in sessions)
            conn.send((round_trips[0], degraded))
        else:
            break
    stop.set()
    driver.join(5)
    for session in sessions:
        session.close()
    conn.send("closed")


class Fleet:
    """*sessions* sessions in processes of PER_PROCESS each."""

    def __init__(self, sessions: int, url: str, prefix: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.sessions = sessions
        self._conns: list[Connection] = []
        self._processes = []
        for first in range(0, sessions, PER_PROCESS):
            parent, child = context.Pipe()
            count = min(PER_PROCESS, sessions - first)
            process = context.Process(target=_worker, args=(child, count, url, prefix), daemon=True)
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)
        for conn in self._conns:
            if not conn.poll(120) or conn.recv() != "ready":
                raise RuntimeError("a worker process did not start")

    def ask(self, *message: Any) -> list[Any]:
        for conn in self._conns:
            conn.send(message)
        answers = []
        for conn in self._conns:
            if not conn.poll(120):
                raise RuntimeError("a worker process did not answer")
            answers.append(conn.recv())
        return answers

    def round_trips(self) -> tuple[int, bool]:
        answers = self.ask("count")
        return sum(trips for trips, _ in answers), any(degraded for _, degraded in answers)

    def close(self) -> None:
        self.ask("stop")
        for process in self._processes:
            process.join(10)
            if process.is_alive():
                process.terminate()


# -- what the server says --------------------------------------------------------------------


def _server(client: redis.Redis) -> tuple[int, int, float]:
    """Commands so far (INFO left out), scripts run so far, and CPU seconds so far."""
    stats = client.info("commandstats")
    commands = sum(int(v["calls"]) for k, v in stats.items() if not k.startswith("cmdstat_info"))
    scripts = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    cpu = client.info("cpu")
    return commands, scripts, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def _idle_cpu(client: redis.Redis, window: float) -> float:
    """The server's CPU seconds per second with no client but this one."""
    _, _, before = _server(client)
    time.sleep(window)
    _, _, after = _server(client)
    return (after - before) / window


def _window(fleet: Fleet, client: redis.Redis, window: float, idle_cpu: float) -> dict[str, Any]:
    trips_before, _ = fleet.round_trips()
    commands, scripts, cpu = _server(client)
    began = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - began
    commands2, scripts2, cpu2 = _server(client)
    trips_after, degraded = fleet.round_trips()
    per = fleet.sessions * elapsed
    return {
        "round_trips": (trips_after - trips_before) / per,
        "commands": (commands2 - commands) / per,
        "scripts": (scripts2 - scripts) / per,
        "cpu_us": max(0.0, (cpu2 - cpu) / elapsed - idle_cpu) * 1e6 / fleet.sessions,
        "core": (cpu2 - cpu) / elapsed,
        "degraded": degraded,
    }


def measure(
    server: RedisServer, sessions: int, hosts: tuple[int, ...], window: float, idle_cpu: float
) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(server.url)
    fleet = Fleet(sessions, server.url, f"bench-cost-{sessions}:")
    rows = []
    try:
        for count in hosts:
            fleet.ask("hosts", count)
            states = [("in use", count), ("1 in use", 1), ("idle", 0)]
            if count == 1:
                del states[1]
            if count > 50 and sessions > IN_USE_500_UP_TO:
                del states[0]
            for state, used in states:
                fleet.ask("use", used)
                time.sleep(IDLE_AFTER)
                rows.append(
                    {"sessions": sessions, "hosts": count, "state": state}
                    | _window(fleet, client, window, idle_cpu)
                )
    finally:
        fleet.close()
        client.close()
    return rows


# -- report ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default=",".join(map(str, SESSIONS)))
    parser.add_argument("--hosts", default=",".join(map(str, HOSTS)))
    parser.add_argument("--window", type=float, default=WINDOW, help="seconds per measurement")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.sessions.split(",")]
    hosts = tuple(int(n) for n in args.hosts.split(","))
    print(
        f"# fleet_cost.py: sessions {counts}, {PER_PROCESS} a process; hosts {list(hosts)}; "
        f"{args.window:g} s windows; sync_interval_ms 100, timeout_ms 20"
    )
    print(
        f"# {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores; redis-py {version('redis')}"
    )
    niceness = -10 if os.geteuid() == 0 else None
    rows: list[dict[str, Any]] = []
    with RedisServer(niceness=niceness) as server:
        client = redis.Redis.from_url(server.url)
        idle_cpu = _idle_cpu(client, args.window)
        info = client.info("server")
        client.close()
        print(
            f"# redis-server {info['redis_version']} on 127.0.0.1:{server.port}, niceness "
            f"{niceness if niceness is not None else 0}; its own idle CPU {idle_cpu * 1e6:.0f} "
            f"us/s, left out below; load average before: {os.getloadavg()[0]:.1f}"
        )
        for sessions in counts:
            rows += measure(server, sessions, hosts, args.window, idle_cpu)
    print("\n## Per session per second\n")
    print(
        table(
            [
                "sessions",
                "hosts held",
                "state",
                "round trips",
                "commands",
                "of them scripts",
                "Redis CPU",
                "Redis, share of a core",
                "degraded",
            ],
            [
                [
                    row["sessions"],
                    row["hosts"],
                    row["state"],
                    f"{row['round_trips']:.2f}",
                    f"{row['commands']:.1f}",
                    f"{row['scripts']:.1f}",
                    f"{row['cpu_us']:.0f} us",
                    f"{row['core'] * 100:.1f} %",
                    "yes" if row["degraded"] else "no",
                ]
                for row in rows
            ],
        )
    )
    holds = []
    low, high = min(hosts), max(hosts)
    for sessions in counts:
        base = _row(rows, sessions, low, "in use")
        most = _row(rows, sessions, high, "1 in use")
        idle = _row(rows, sessions, high, "idle")
        if base is None or most is None or idle is None or low == high:
            continue
        commands = most["commands"] <= 1.5 * base["commands"]
        cpu = most["cpu_us"] <= 1.5 * base["cpu_us"]
        holds.append(commands and cpu and not most["degraded"] and idle["scripts"] == 0)
        print(
            f"\n{sessions} sessions, {high} hosts held, 1 in use, against {low} host in use: "
            f"commands {most['commands']:.1f} against {base['commands']:.1f}, Redis CPU "
            f"{most['cpu_us']:.0f} against {base['cpu_us']:.0f} us per session per second; "
            f"{high} idle hosts: {idle['scripts']:.1f} scripts, {idle['commands']:.2f} "
            f"commands per session per second; within 1.5x, no script for idle hosts: "
            f"{verdict(holds[-1])}"
        )
    _slope(rows, counts)
    return 0 if all(holds) else 1


def _row(rows: list[dict[str, Any]], sessions: int, hosts: int, state: str) -> Any:
    for row in rows:
        if (row["sessions"], row["hosts"], row["state"]) == (sessions, hosts, state):
            return row
    return None


def _slope(rows: list[dict[str, Any]], counts: list[int]) -> None:
    """Redis CPU per host in use per session per second, between the fewest and the most
    hosts measured in use whose syncs kept up (about 10 round trips a second)."""
    for sessions in counts:
        used = sorted(
            (
                row
                for row in rows
                if row["sessions"] == sessions
                and row["state"] == "in use"
                and row["round_trips"] >= 0.9 / INTERVAL
            ),
            key=lambda row: row["hosts"],
        )
        if len(used) < 2:
            continue
        first, last = used[0], used[-1]
        added = last["hosts"] - first["hosts"]
        slope = (last["cpu_us"] - first["cpu_us"]) / added
        commands = (last["commands"] - first["commands"]) / added
        print(
            f"{sessions} sessions, in use: each host in use adds {slope:.0f} us of Redis CPU "
            f"and {commands:.1f} commands per session per second ({first['hosts']} to "
            f"{last['hosts']} hosts; at {first['hosts']}: {first['cpu_us']:.0f} us, "
            f"{first['commands']:.1f} commands)"
        )


if __name__ == "__main__":
    sys.exit(main())
