"""Instructions per call for httpx's clients: ResilientClient against plain httpx.Client, and
AsyncResilientClient against plain httpx.AsyncClient, counted as instr_meter.py counts
requests (the difference between two whole processes that differ only in the number of calls).

Both clients of a pair send on the same inner transport, which answers a canned 200 at once,
so each runs all of its own code and none of the network's; the async pair's calls are
awaited one after another on one asyncio loop.

A third figure, ``plain httpx, same jar``, is plain httpx's client with the resilient clients'
cookie jar (``AnswerCookies``, which skips ``http.cookiejar`` for an answer that sets no
cookie, as the canned one sets none): what the resilient client adds over it is the cost of
its stages alone, and what the jar saves is told apart from it.

Usage (from the project root):
  python benchmarks/instr_httpx.py                  # sync and async pairs
  python benchmarks/instr_httpx.py --only async --calls 800 --reps 1
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
from typing import Any

from instr_meter import URL, WARM, instructions, per_call, pick_meter


def _canned() -> tuple[Any, Any]:
    import httpx

    headers = {"Content-Type": "application/json", "Content-Length": "2"}

    class Canned(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, headers=headers, content=b"{}")

    class AsyncCanned(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, headers=headers, content=b"{}")

    return Canned(), AsyncCanned()


def _freeze() -> None:
    # As instr_meter.py's child does, and for its reason: the heap the imports and the client
    # made is left out of the collector's reach, so whether a full collection falls inside the
    # counted calls (and what it walks) does not move the count.
    gc.collect()
    gc.freeze()


def _same_jar(client: Any) -> None:
    from resilient_session._transport.httpx_cookies import AnswerCookies

    client._cookies = AnswerCookies(client._cookies.jar)


def child(kind: str, which: str, n: int) -> None:
    """One measured process: *n* calls after ``WARM`` on the *kind* (sync, async) client."""
    import httpx

    from resilient_session.httpx import AsyncResilientClient, ResilientClient

    canned, async_canned = _canned()
    if kind == "sync":
        client: Any = (
            ResilientClient(transport=canned)
            if which == "resilient"
            else httpx.Client(transport=canned)
        )
        if which == "same-jar":
            _same_jar(client)
        get = client.get
        _freeze()
        for _ in range(WARM + n):
            r = get(URL)
        if r.status_code != 200:
            raise SystemExit(f"{which}: status {r.status_code}")
        return

    import asyncio

    async def calls() -> None:
        client: Any = (
            AsyncResilientClient(transport=async_canned)
            if which == "resilient"
            else httpx.AsyncClient(transport=async_canned)
        )
        if which == "same-jar":
            _same_jar(client)
        get = client.get
        _freeze()
        for _ in range(WARM + n):
            r = await get(URL)
        if r.status_code != 200:
            raise SystemExit(f"{which}: status {r.status_code}")

    asyncio.run(calls())


def count(meter: str, kind: str, which: str, n: int) -> int:
    return instructions(meter, [sys.executable, __file__, "--run", kind, which, str(n)])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--run", nargs=3, metavar=("KIND", "WHICH", "N"))
    ap.add_argument("--only", choices=("sync", "async"))
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if a.run:
        child(a.run[0], a.run[1], int(a.run[2]))
        return
    meter = pick_meter()
    for kind in ("sync", "async"):
        if a.only is not None and kind != a.only:
            continue
        figures = {
            which: per_call(functools.partial(count, meter, kind, which), a.calls, a.reps)
            for which in ("plain", "same-jar", "resilient")
        }
        p, j, c = (figures[which]["per_call"] for which in ("plain", "same-jar", "resilient"))
        spread = ", ".join(f"{which} {figures[which]['spread']:,.0f}" for which in figures)
        print(
            f"{kind} instructions per call ({meter}): plain httpx {p:,.0f}, resilient {c:,.0f}"
            f" (x{c / p:.3f}); plain httpx, same jar {j:,.0f}: the stages add {c - j:,.0f}"
            f" (x{c / j:.3f}), the jar saves {p - j:,.0f}; spread {spread}"
        )


if __name__ == "__main__":
    main()
