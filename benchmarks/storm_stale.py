"""The outage row with stale serving: a host whose GETs were answered goes down, and the
calls to it are answered from its last good answers, against the same outage without them.

A loopback upstream answers 20 URLs with 200 once each; then every request gets 503 for the
outage. Eight callers call the 20 URLs in turn, back to back, on one session with the default
config (stale on for the one, off for the other). Printed per session: calls, the share served
stale (``fallback_of``), the share that failed, and the tries the upstream saw per call.

Usage: python benchmarks/storm_stale.py [--quick]
"""

from __future__ import annotations

import argparse
import threading
import time

from resilient_session import ResilientSession, fallback_of
from resilient_session.testing.upstream import FlakyUpstream, Reply

URLS = 20
CALLERS = 8


def run(stale: bool, seconds: float) -> tuple[int, float, float, float]:
    """Calls made in the outage, and of them the share served stale, the share failed, and
    the tries the upstream saw per call."""
    config = {"defaults": {"fallback": {"stale": {"enabled": stale}}}}
    with FlakyUpstream() as upstream, ResilientSession(config) as session:
        paths = [f"/item/{n}" for n in range(URLS)]
        for path in paths:
            upstream.script(path, Reply(200, body=b"x" * 512), Reply(503))
            session.get(upstream.url(path))
        before = upstream.total_hits
        counts = {"calls": 0, "stale": 0, "failed": 0}
        lock = threading.Lock()
        ends = time.monotonic() + seconds

        def caller(offset: int) -> None:
            n = offset
            while time.monotonic() < ends:
                try:
                    response = session.get(upstream.url(paths[n % URLS]))
                    served = fallback_of(response) is not None
                    failed = not served and response.status_code >= 500
                except Exception:  # noqa: BLE001 - a refusal or an error: a failed call
                    served, failed = False, True
                with lock:
                    counts["calls"] += 1
                    counts["stale"] += served
                    counts["failed"] += failed
                n += 1

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(CALLERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(seconds + 30)
        tries = upstream.total_hits - before
    calls = counts["calls"]
    return calls, counts["stale"] / calls, counts["failed"] / calls, tries / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 2 s outage instead of 6 s")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else 6.0
    print(f"outage of {seconds:g} s, {CALLERS} callers over {URLS} URLs answered before")
    print(f"{'stack':<34}{'calls':>8}{'stale':>9}{'failed':>9}{'tries/call':>12}")
    for stale in (True, False):
        calls, served, failed, tries = run(stale, seconds)
        name = "ResilientSession, stale on" if stale else "ResilientSession"
        print(f"{name:<34}{calls:>8}{served:>9.1%}{failed:>9.1%}{tries:>12.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
