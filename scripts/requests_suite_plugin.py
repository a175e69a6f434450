"""pytest plugin for scripts/requests-suite: loopback-only network, optional Session swap.

Loaded with ``-p requests_suite_plugin`` into requests' own test suite. Both runs get the same
network guard, so a test that needs the internet fails or skips identically in each; with
``--resilient-swap`` every way requests' tests build a session yields a ``ResilientSession``,
and the constructions are counted to prove it.
"""

from __future__ import annotations

import importlib
import ipaddress
import json
import socket
import threading
from collections import Counter
from collections.abc import Callable, Generator
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any

import pytest
from pluggy import Result

_COUNTS: Counter[str] = Counter()
_OUTCOMES: dict[str, dict[str, str | float]] = {}
_SWAP: dict[str, str] = {}
_LOCK = threading.Lock()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("requests-suite")
    group.addoption(
        "--resilient-swap",
        action="store_true",
        help="replace requests.Session, requests.sessions.Session and requests.session "
        "with resilient_session.ResilientSession for this run",
    )
    group.addoption(
        "--suite-report",
        default=None,
        help="write per-test outcomes and swap counters to this JSON file",
    )


def pytest_configure(config: pytest.Config) -> None:
    _guard_network()
    _thread_httpbin()
    # Counted before the swap, so the original class's __init__ is the one wrapped: every
    # session of either class runs it once.
    _count_sessions()
    if config.getoption("resilient_swap"):
        _swap_sessions()


# --- network guard ---------------------------------------------------------------------------

_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def _is_loopback_ip(host: str) -> bool | None:
    """True or False for an IP literal, None for a name."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _is_local_name(host: str) -> bool:
    name = host.rstrip(".").lower()
    return name in _LOCAL_NAMES or name.endswith(".localhost")


def _guard_network() -> None:
    """Refuse every target outside 127.0.0.0/8 and ::1 before any packet leaves.

    A name other than localhost fails to resolve, as it would with no DNS; a non-loopback
    IP literal times out at connect, as a firewall that drops packets makes it: that is what
    requests' TARPIT tests expect of 10.255.255.1, and it costs no waiting.
    """
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_gethostbyname = socket.gethostbyname
    real_gethostbyname_ex = socket.gethostbyname_ex

    def refuse_name(host: object) -> None:
        if host is None or host == "":
            return
        text = host.decode("ascii", "replace") if isinstance(host, bytes) else str(host)
        if _is_loopback_ip(text) is None and not _is_local_name(text):
            with _LOCK:
                _COUNTS["blocked_lookups"] += 1
            raise socket.gaierror(socket.EAI_NONAME, f"requests-suite: lookup of {text} blocked")

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        refuse_name(host)
        return real_getaddrinfo(host, *args, **kwargs)

    def gethostbyname(host: str) -> str:
        refuse_name(host)
        return real_gethostbyname(host)

    def gethostbyname_ex(host: str) -> tuple[str, list[str], list[str]]:
        refuse_name(host)
        return real_gethostbyname_ex(host)

    def check_target(address: Any) -> None:
        if not isinstance(address, tuple):
            return  # AF_UNIX paths never leave the machine
        host = str(address[0])
        loopback = _is_loopback_ip(host)
        if loopback is None:
            refuse_name(host)
            return
        if not loopback:
            with _LOCK:
                _COUNTS["blocked_connects"] += 1
            raise TimeoutError(f"requests-suite: connect to {host} blocked (timed out)")

    def connect(self: socket.socket, address: Any) -> None:
        check_target(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check_target(address)
        return real_connect_ex(self, address)

    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname
    socket.gethostbyname_ex = gethostbyname_ex
    # The stubs type these slots on _socket.socket; the wrappers accept the same arguments.
    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]


def _thread_httpbin() -> None:
    """Serve pytest-httpbin from a thread per request, in both runs alike.

    Its single-threaded server makes every ``delay/10`` request block the tests after it for
    ten seconds; a client that retries a read timeout (as the resilient run does) queues more
    of them, and the suite would spend minutes waiting on the server rather than testing.
    """
    try:
        serve: Any = importlib.import_module("pytest_httpbin.serve")
    except ImportError:
        return
    # Daemon threads and no join on close: a request still sleeping in delay/10 when the
    # session ends must not hold the run open.
    fields = {"daemon_threads": True, "block_on_close": False}
    threaded = type("ThreadedWSGIServer", (ThreadingMixIn, serve.WSGIServer), fields)
    threaded_secure = type(
        "ThreadedSecureWSGIServer", (ThreadingMixIn, serve.SecureWSGIServer), fields
    )
    real_make_server = serve.make_server

    def make_server(*args: Any, server_class: Any = None, **kwargs: Any) -> Any:
        chosen = threaded_secure if server_class is serve.SecureWSGIServer else threaded
        return real_make_server(*args, server_class=chosen, **kwargs)

    serve.make_server = make_server


# --- the swap ----------------------------------------------------------------------------------


def _count_sessions() -> None:
    """Count every ``requests.Session`` built, whatever class the test asked for."""
    import requests.sessions

    original_init: Callable[..., None] = requests.sessions.Session.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        with _LOCK:
            _COUNTS["sessions"] += 1
        original_init(self, *args, **kwargs)

    requests.sessions.Session.__init__ = counting_init  # type: ignore[method-assign]


def _swap_sessions() -> None:
    import requests
    import requests.sessions

    import resilient_session
    from resilient_session import ResilientAdapter, ResilientSession

    original_init: Callable[..., None] = ResilientSession.__init__
    original_send: Callable[..., Any] = ResilientAdapter.send

    def counting_init(self: ResilientSession, *args: Any, **kwargs: Any) -> None:
        with _LOCK:
            _COUNTS["resilient_sessions"] += 1
        original_init(self, *args, **kwargs)

    def counting_send(self: ResilientAdapter, *args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            _COUNTS["resilient_sends"] += 1
        return original_send(self, *args, **kwargs)

    def session() -> ResilientSession:
        """Return a :class:`ResilientSession` (``requests.session``, swapped)."""
        return ResilientSession()

    ResilientSession.__init__ = counting_init  # type: ignore[method-assign]
    ResilientAdapter.send = counting_send  # type: ignore[method-assign]
    requests.Session = ResilientSession  # type: ignore[misc]
    requests.sessions.Session = ResilientSession  # type: ignore[misc]
    requests.session = session
    requests.sessions.session = session
    _SWAP["module"] = str(Path(resilient_session.__file__).parent)


# --- outcomes ----------------------------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport], None]:
    report = (yield).get_result()
    entry = _OUTCOMES.setdefault(item.nodeid, {"outcome": "passed", "seconds": 0.0})
    entry["seconds"] = round(float(entry["seconds"]) + report.duration, 3)
    # An error in any phase fails the test; a skip (or an xfail) in any phase skips it.
    if report.failed:
        entry["outcome"] = "failed"
    elif report.skipped and entry["outcome"] != "failed":
        entry["outcome"] = "skipped"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    write = terminalreporter.write_line
    write(
        "requests-suite: network guard: "
        f"{_COUNTS['blocked_lookups']} lookups and {_COUNTS['blocked_connects']} connects "
        "to non-loopback targets refused"
    )
    if _SWAP:
        write(
            f"requests-suite: swap: {_COUNTS['resilient_sessions']} of {_COUNTS['sessions']} "
            f"sessions built were ResilientSession; {_COUNTS['resilient_sends']} "
            f"ResilientAdapter.send calls; resilient_session loaded from {_SWAP['module']}"
        )
    else:
        write(f"requests-suite: {_COUNTS['sessions']} requests.Session objects built")


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("suite_report")
    if not path:
        return
    payload = {"outcomes": _OUTCOMES, "counts": dict(_COUNTS), "swap": _SWAP}
    Path(path).write_text(json.dumps(payload, indent=1, sort_keys=True), encoding="utf-8")
