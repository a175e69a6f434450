"""Instructions per call: what a session costs over plain requests, counted, not timed.

Wall-clock overhead on a shared 2-core VM swings by 2-3x between runs; user-space instruction
counts repeat within a fraction of a percent. Each figure is the difference between two whole
processes that differ only in the number of calls made, so start-up and import costs cancel:
``per_call = (I(warm + n) - I(warm)) / n``.

``HTTPAdapter.send`` is patched to answer a canned 200 at once, so both sessions run all of their
own code and none of the network's.

The meter is ``perf stat -e instructions:u`` where the machine exposes hardware counters, else
valgrind's cachegrind (user-space instructions too, about 30 times slower, so fewer calls serve:
``--calls 800 --reps 1``; it repeats exactly). Divide an instruction delta by plain requests'
instructions per call to read it as a share of a requests call.

Usage (from the project root, in a venv with the project installed):
  python benchmarks/instr_meter.py                    # plain vs resilient_session:ResilientSession
  python benchmarks/instr_meter.py --structlog json   # events rendered as JSON via stdlib logging
  PYTHONPATH=benchmarks python benchmarks/instr_meter.py --factory overhead:deadline_session
  python benchmarks/instr_meter.py --calls 800 --reps 1 --json out.json
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

URL = "http://127.0.0.1:9/perf/item?id=1"
# What a child process is given of this one's environment: where to find valgrind or perf, the
# factories' modules, and the guard's layout padding.
_CARRIED = ("PATH", "HOME", "PYTHONPATH", "INSTR_GUARD_LAYOUT")
# The rest of it: thirty variables, about what a service's process starts with (these machines'
# shells hold 35 and 1,300 bytes), so plain requests' count per call is a service's.
_SERVICE_ENVIRONMENT = {f"SERVICE_SETTING_{i:02}": "s" * 24 for i in range(30)}
WARM = 300


def _patch_send() -> None:
    import requests.adapters
    from requests.models import Response
    from requests.structures import CaseInsensitiveDict

    headers = {"Content-Type": "application/json", "Content-Length": "2"}

    class _Raw:
        def close(self) -> None:
            pass

        def release_conn(self) -> None:
            pass

    raw = _Raw()

    def canned_send(
        self: Any,
        request: Any,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> Response:
        r = Response()
        r.status_code = 200
        r.reason = "OK"
        r.headers = CaseInsensitiveDict(headers)
        r._content = b"{}"
        r._content_consumed = True
        r.encoding = "utf-8"
        r.url = request.url
        r.request = request
        r.connection = self
        r.raw = raw
        return r

    requests.adapters.HTTPAdapter.send = canned_send  # type: ignore[assignment,method-assign]


def child(which: str, n: int, factory: str, structlog_mode: str) -> None:
    """One measured process: *n* calls after ``WARM``, with plain requests or the factory's."""
    sys.path.insert(0, os.getcwd())
    import requests

    if structlog_mode == "json":
        import logging

        import structlog

        sink = open(os.devnull, "w")  # noqa: SIM115 - held for the process's life
        logging.basicConfig(stream=sink, level=logging.INFO, format="%(message)s")
        structlog.configure(
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso"),
                structlog.processors.JSONRenderer(),
            ],
            logger_factory=structlog.stdlib.LoggerFactory(),
            wrapper_class=structlog.stdlib.BoundLogger,
            cache_logger_on_first_use=True,
        )
    _patch_send()
    # Both sides import the factory's module: the two processes then load the same modules
    # and differ in which session makes the calls alone. Which modules are loaded moves the
    # interpreter's caches and heap, and with them a plain call's count by thousands.
    module, _, attr = factory.partition(":")
    made: Any = importlib.import_module(module)
    session: Any
    if which == "plain":
        session = requests.Session()
    else:
        for part in attr.split("."):
            made = getattr(made, part)
        session = made()
    get = session.get
    # The heap the imports and the session made is left out of the collector's reach, as a
    # latency-minded service does after start-up (gc.freeze): a full collection falling inside
    # the counted calls would otherwise cost a walk of every import's objects, and whether one
    # falls there moves with the size of that heap (a module more, a checkout's path longer),
    # by several thousand instructions a call that no line of the calls spends.
    gc.collect()
    gc.freeze()
    for _ in range(WARM + n):
        r = get(URL)
    if r.status_code != 200:
        raise SystemExit(f"{which}: status {r.status_code}")


def pick_meter() -> str:
    """perf when it can count user-space instructions here, else valgrind (cachegrind)."""
    if shutil.which("perf"):
        p = subprocess.run(
            ["perf", "stat", "-x,", "-e", "instructions:u", "true"],  # noqa: S607
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode == 0 and "<not supported>" not in p.stderr and "instructions" in p.stderr:
            return "perf"
    if shutil.which("valgrind"):
        return "valgrind"
    raise SystemExit(
        "no instruction meter: perf without hardware counters and no valgrind "
        "(Debian: linux-perf or valgrind)"
    )


def count(meter: str, which: str, n: int, factory: str, structlog_mode: str) -> int:
    """Instructions one whole child process of this meter runs."""
    return instructions(
        meter,
        [
            sys.executable,
            __file__,
            "--run",
            which,
            str(n),
            "--factory",
            factory,
            "--structlog",
            structlog_mode,
        ],
    )


def instructions(meter: str, command: list[str]) -> int:
    """The user-space instructions *command* runs, counted by *meter* (``perf`` or
    ``valgrind``)."""
    if meter == "perf":
        cmd = ["perf", "stat", "-x,", "-e", "instructions:u", *command]
    else:
        cmd = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            *command,
        ]
    # A fixed hash seed: set and dict layouts, and so the count, repeat from run to run. A
    # fixed environment: requests scans every variable of it for proxies on each call, so a
    # machine's own (a CI runner's, a shell's) would move both counts and the gap between them.
    env = {name: os.environ[name] for name in _CARRIED if name in os.environ}
    env.update(_SERVICE_ENVIRONMENT, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run(  # noqa: S603 - a benchmark's own child, built from fixed parts
        cmd, capture_output=True, text=True, env=env, timeout=1800, check=False
    )
    if p.returncode != 0:
        raise SystemExit(f"child failed ({' '.join(command[2:])}): {p.stderr.strip()[-400:]}")
    for line in p.stderr.splitlines():
        if meter == "perf":
            parts = line.split(",")
            if len(parts) > 2 and parts[2].startswith("instructions"):
                return int(parts[0])
        elif "I" in line and "refs:" in line:
            return int(line.split("refs:")[1].strip().replace(",", ""))
    raise SystemExit(f"{meter} printed no instruction count: {p.stderr.strip()[-400:]}")


def per_call(count_at: Callable[[int], int], n: int, reps: int) -> dict[str, Any]:
    """Instructions per call: ``count_at(k)`` counts a process that makes k calls after its
    warm-up; the process without calls is taken from the one with *n*, *reps* times."""
    base = [count_at(0) for _ in range(reps)]
    full = [count_at(n) for _ in range(reps)]
    values = [(f - b) / n for b, f in zip(base, full, strict=True)]
    return {
        "per_call": statistics.median(values),
        "spread": max(values) - min(values),
        "runs": values,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--run", nargs=2, metavar=("WHICH", "N"))
    ap.add_argument("--factory", default="resilient_session:ResilientSession")
    ap.add_argument("--structlog", choices=("default", "json"), default="default")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.run:
        child(a.run[0], int(a.run[1]), a.factory, a.structlog)
        return
    meter = pick_meter()
    out: dict[str, Any] = {"calls": a.calls, "structlog": a.structlog, "meter": meter}
    for which in ("plain", "candidate"):
        out[which] = per_call(
            functools.partial(count, meter, which, factory=a.factory, structlog_mode=a.structlog),
            a.calls,
            a.reps,
        )
    p, c = out["plain"]["per_call"], out["candidate"]["per_call"]
    out["added_per_call"] = c - p
    out["ratio"] = c / p
    print(
        f"instructions per call ({a.structlog}, {meter}): plain {p:,.0f}, candidate {c:,.0f}, "
        f"added {c - p:,.0f} (x{c / p:.3f}); spread plain {out['plain']['spread']:,.0f}, "
        f"candidate {out['candidate']['spread']:,.0f}"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
