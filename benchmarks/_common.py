"""Helpers the benchmarks share: a canned transport, RSS, medians and plain-text tables."""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
from collections.abc import Iterator, Sequence
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _canned_send(
    self: HTTPAdapter,
    request: requests.PreparedRequest,
    stream: bool = False,
    timeout: Any = None,
    verify: bool | str = True,
    cert: Any = None,
    proxies: Any = None,
) -> requests.Response:
    # A response already read, as `responses` hands back: what remains is the client's work.
    response = requests.Response()
    response.status_code = 200
    response.reason = "OK"
    response.headers = CaseInsensitiveDict({"Content-Type": "text/plain", "Content-Length": "2"})
    response._content = b"ok"
    response.url = request.url or ""
    response.request = request
    response.connection = self
    return response


@contextlib.contextmanager
def canned_transport() -> Iterator[None]:
    """Patch ``HTTPAdapter.send`` to answer 200 at once, without a socket.

    ``ResilientAdapter`` sends each try through ``HTTPAdapter.send``, so both sessions run all
    of their own code and none of the network's.
    """
    original = HTTPAdapter.send
    original_getaddrinfo = socket.getaddrinfo
    HTTPAdapter.send = _canned_send  # type: ignore[method-assign]
    # The made-up hostnames must never reach a resolver, even if something bypasses the patch.
    socket.getaddrinfo = _loopback_only
    try:
        yield
    finally:
        HTTPAdapter.send = original  # type: ignore[method-assign]
        socket.getaddrinfo = original_getaddrinfo


_real_getaddrinfo = socket.getaddrinfo


def _loopback_only(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host not in ("localhost", "127.0.0.1", "::1", None):
        raise socket.gaierror(socket.EAI_NONAME, f"benchmarks: no lookups of {host} here")
    return _real_getaddrinfo(host, *args, **kwargs)


def rss_bytes() -> int:
    """The resident set size of this process now (not its peak)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * _PAGE


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pair_stats(plain: Sequence[float], resilient: Sequence[float]) -> tuple[float, float]:
    """Median of the per-pair differences and of the per-pair ratios (resilient / plain).

    Pairs ran back to back, so drift in the machine's speed cancels within each pair.
    """
    pairs = list(zip(plain, resilient, strict=True))
    return (
        median([r - p for p, r in pairs]),
        median([r / p for p, r in pairs if p > 0]),
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table, readable as plain text too."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        padded = (
            value.ljust(width) if i == 0 else value.rjust(width)
            for i, (value, width) in enumerate(zip(values, widths, strict=True))
        )
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|"
        + "|".join("-" * (width + 1) + ("-" if i == 0 else ":") for i, width in enumerate(widths))
        + "|"
    )
    return "\n".join([line(headers), rule, *(line(row) for row in cells)])


def verdict(holds: bool) -> str:
    return "holds" if holds else "MISSED"
