"""Instructions per call over loopback: what a session costs over plain requests, counted.

The method of ``instr_meter.py`` (two whole processes that differ only in the number of
calls, so start-up and import cancel: ``per_call = (I(warm + n) - I(warm)) / n``), with a real
socket: sequential GETs over one keep-alive connection, ``timeout=(5, 30)``, to
``_upstream.py``'s server in a process of its own, outside the count. The counter is
valgrind's cachegrind (``--cache-sim=no``): user-space instructions, exact and repeatable, as
this VM exposes no hardware counters to ``perf``.

Usage (from the project root, in a venv with the project installed, ``PYTHONPATH=benchmarks``):
  python benchmarks/instr_loopback.py                                    # plain vs ResilientSession
  python benchmarks/instr_loopback.py --factory overhead:deadline_session  # every call a deadline
  python benchmarks/instr_loopback.py --calls 1000 --reps 2 --json out.json

To count a variant of the library, put its ``src`` first on ``PYTHONPATH``: the children
inherit the environment.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import shutil
import sys
from typing import Any

from instr_meter import instructions, per_call

WARM = 200
TIMEOUT = (5.0, 30.0)


def child(which: str, n: int, factory: str, port: int) -> None:
    """Make WARM + *n* calls with one session: the process whose instructions are counted."""
    import requests

    if which == "plain":
        session: Any = requests.Session()
    else:
        module, _, attr = factory.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        session = obj()
    get = session.get
    url = f"http://127.0.0.1:{port}/item?id=1"
    response = None
    for _ in range(WARM + n):
        response = get(url, timeout=TIMEOUT)
    if response is None or response.status_code != 200 or response.content != b"ok":
        raise SystemExit(f"{which}: unexpected answer")


def count(which: str, n: int, factory: str, port: int) -> int:
    """User-space instructions of one child process, counted by cachegrind."""
    return instructions(
        "valgrind",
        [
            sys.executable,
            __file__,
            "--run",
            which,
            str(n),
            "--factory",
            factory,
            "--port",
            str(port),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", nargs=2, metavar=("WHICH", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--factory", default="resilient_session:ResilientSession")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--only", choices=("plain", "candidate"), help="count one side only")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.run:
        child(args.run[0], int(args.run[1]), args.factory, args.port)
        return
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind not on PATH")
    from _upstream import Upstream

    out: dict[str, Any] = {"calls": args.calls, "factory": args.factory}
    sides = (args.only,) if args.only else ("plain", "candidate")
    with Upstream() as upstream:
        for which in sides:
            port = upstream.ports[0]
            out[which] = per_call(
                functools.partial(count, which, factory=args.factory, port=port),
                args.calls,
                args.reps,
            )
            result = out[which]
            runs = ", ".join(f"{value:,.0f}" for value in result["runs"])
            print(f"{which}: {result['per_call']:,.0f} instructions per call ({runs})", flush=True)
    if "plain" in out and "candidate" in out:
        plain, candidate = out["plain"]["per_call"], out["candidate"]["per_call"]
        print(f"added {candidate - plain:,.0f} (x{candidate / plain:.4f})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as sink:
            json.dump(out, sink, indent=1)


if __name__ == "__main__":
    main()
