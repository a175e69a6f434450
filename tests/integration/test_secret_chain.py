"""No secret of a URL shows when an exception the library raised is printed with its chain.

Each test makes the library raise one of its own exceptions against real loopback sockets,
for a URL with a password in its userinfo and a secret in each of a dozen sensitive
parameters, then prints it as ``traceback.format_exception`` and ``logging`` do (cause,
context and notes included) and looks for every secret in the text. What the exception
stands for stays reachable, unprinted, as its ``original``.
"""

from __future__ import annotations

import base64
import io
import logging
import random
import threading
import traceback
from collections.abc import Callable
from typing import Any

import pytest
import requests
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from resilient_session import (
    SYSTEM_CLOCK,
    CircuitOpenError,
    ConcurrencyLimitError,
    DeadlineExceeded,
    ResilientSession,
    ThrottledError,
    deadline,
)
from resilient_session.testing.upstream import Drip, FlakyUpstream, Hang, Reply, refused_url
from tests.integration.stall import full_backlog

pytestmark = pytest.mark.integration

# One secret per place a URL can carry one; each value is unique, so a hit names its place.
PARAMS = {
    "token": "tok-s3cret",
    "api_key": "apikey-s3cret",
    "password": "qpass-s3cret",
    "secret": "plain-s3cret",
    "signature": "signature-s3cret",
    "code": "code-s3cret",
    "access_token": "access-s3cret",
    "client_secret": "client-s3cret",
    "X-Amz-Signature": "amz-s3cret",
    "sig": "sig-s3cret",
}
PASSWORD = "userinfo-s3cret"  # noqa: S105 - planted, to be looked for
SECRETS = (
    PASSWORD,
    *PARAMS.values(),
    "jsession-s3cret",
    "frag-s3cret",
    # requests turns user:password@ into a Basic Authorization header.
    base64.b64encode(f"alice:{PASSWORD}".encode()).decode(),
)
QUERY = "page=2&" + "&".join(f"{name}={value}" for name, value in PARAMS.items())
FAST = {"retry": {"backoff_base": 0.01, "backoff_cap": 0.05}}


def secret_url(origin: str) -> str:
    """*origin* (``scheme://host:port``) with a login, secret parameters and a fragment."""
    scheme, _, hostport = origin.partition("://")
    return (
        f"{scheme}://alice:{PASSWORD}@{hostport}/p;jsessionid=jsession-s3cret/items"
        f"?{QUERY}#access_token=frag-s3cret"
    )


def session_with(**sections: dict[str, Any]) -> ResilientSession:
    defaults: dict[str, Any] = {name: dict(values) for name, values in FAST.items()}
    for name, values in sections.items():
        defaults[name] = {**defaults.get(name, {}), **values}
    return ResilientSession({"defaults": defaults}, rng=random.Random(7))


def raised(call: Callable[[], object]) -> requests.RequestException:
    """The exception *call* raised, as a caller catches it."""
    try:
        call()
    except requests.RequestException as exc:
        return exc
    pytest.fail("the call did not raise")


def printed(exc: BaseException) -> str:
    """*exc* as ``traceback.format_exception`` and ``logging``'s ``exc_info`` print it."""
    stream = io.StringIO()
    logger = logging.getLogger(f"{__name__}.printed")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error("call failed", exc_info=exc)
    finally:
        logger.removeHandler(handler)
    return "".join(traceback.format_exception(exc)) + stream.getvalue()


def chain_texts(exc: BaseException) -> list[str]:
    """str, repr and args of *exc* and of every exception its cause and context reach, and
    their notes."""
    texts: list[str] = []
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending and len(seen) < 50:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current), *map(repr, current.args)]
        texts += [str(note) for note in getattr(current, "__notes__", ())]
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    return texts


def leaks(*texts: str) -> list[str]:
    """Every secret that shows in one of *texts*."""
    return [secret for secret in SECRETS if any(secret in text for text in texts)]


def assert_sealed(exc: BaseException, kind: type[BaseException]) -> None:
    """*exc* is a *kind* that prints alone, and prints no secret."""
    assert type(exc) is kind
    text = printed(exc)
    assert leaks(text, *chain_texts(exc)) == []
    assert text.count("Traceback (most recent call last)") == 2  # once each way: no chain
    assert f"{kind.__module__}.{kind.__qualname__}: " in text
    assert (exc.__cause__, exc.__context__) == (None, None)


def test_connect_stall_cut_by_the_deadline():
    """A connect to a host that never accepts, cut by the deadline: DeadlineExceeded prints
    no secret, and the ConnectTimeout it replaced, urllib3's whole URL in it, is its original."""
    with full_backlog() as origin, session_with() as session:
        exc = raised(lambda: session.get(secret_url(origin), deadline=0.3))
    assert_sealed(exc, DeadlineExceeded)
    assert isinstance(exc, DeadlineExceeded)
    assert "ran out during try 1" in str(exc)
    assert isinstance(exc.original, requests.ConnectTimeout)
    # The original is the unredacted one: kept for a deliberate look, never printed.
    assert "tok-s3cret" in str(exc.original)


def test_read_hang_cut_by_the_deadline():
    """An upstream that accepts and never answers, cut by the deadline: DeadlineExceeded
    prints no secret and keeps the timeout it replaced."""
    with FlakyUpstream() as upstream, session_with() as session:
        upstream.script("/p;jsessionid=jsession-s3cret/items", Hang(5.0), cycle=True)
        exc = raised(lambda: session.get(secret_url(upstream.base_url), deadline=0.3))
    assert_sealed(exc, DeadlineExceeded)
    assert isinstance(exc, DeadlineExceeded)
    assert isinstance(exc.original, requests.ReadTimeout)


def test_body_trickle_past_the_deadline():
    """A body that sends one byte a second, cut by the deadline while it is read:
    DeadlineExceeded names the URL redacted and keeps urllib3's read error."""
    with FlakyUpstream() as upstream, session_with() as session:
        upstream.script(
            "/p;jsessionid=jsession-s3cret/items", Drip(total_bytes=100, interval=1.0), cycle=True
        )
        exc = raised(lambda: session.get(secret_url(upstream.base_url), deadline=0.4))
    assert_sealed(exc, DeadlineExceeded)
    assert isinstance(exc, DeadlineExceeded)
    assert "while reading the body of 200" in str(exc)
    assert "token=REDACTED" in str(exc)
    assert isinstance(exc.original, ReadTimeoutError | ProtocolError)


def test_deadline_spent_before_the_first_try():
    """A call made after its deadline has passed fails before it is sent: DeadlineExceeded
    names the host alone and has no original."""
    with FlakyUpstream() as upstream, session_with() as session:
        url = secret_url(upstream.base_url)
        with deadline(0.05):
            SYSTEM_CLOCK.sleep(0.1)
            exc = raised(lambda: session.get(url))
        hits = upstream.hits("/p;jsessionid=jsession-s3cret/items")
    assert_sealed(exc, DeadlineExceeded)
    assert isinstance(exc, DeadlineExceeded)
    assert "spent before try 1" in str(exc)
    assert (exc.original, hits) == (None, 0)


def test_breaker_open_refusal():
    """A refused host opens its breaker; the next call's CircuitOpenError prints no secret."""
    url = secret_url(refused_url("/").rstrip("/"))
    with session_with(retry={"max_attempts": 1}, breaker={"failure_threshold": 1}) as session:
        first = raised(lambda: session.get(url))
        exc = raised(lambda: session.get(url))
    assert type(first) is requests.ConnectionError
    assert_sealed(exc, CircuitOpenError)
    assert isinstance(exc, CircuitOpenError)
    assert exc.original is None


def test_throttled_refusal():
    """A host that fails every try is throttled; the ThrottledError prints no secret."""
    config: dict[str, dict[str, Any]] = {
        "retry": {"max_attempts": 1},
        "breaker": {"failure_threshold": 1_000_000},
        "throttle": {"k": 1.0, "min_tries": 1},
    }
    refused: list[requests.RequestException] = []
    with FlakyUpstream() as upstream, session_with(**config) as session:
        upstream.script("/p;jsessionid=jsession-s3cret/items", Reply(503), cycle=True)
        url = secret_url(upstream.base_url)
        statuses: list[int] = []
        for _ in range(30):  # each refused with a chance of at least one in two
            try:
                statuses.append(session.get(url, timeout=2.0).status_code)
            except ThrottledError as exc:
                refused.append(exc)
                break
    assert len(refused) == 1
    assert set(statuses) <= {503}
    assert_sealed(refused[0], ThrottledError)
    assert isinstance(refused[0], ThrottledError)
    assert refused[0].original is None


def test_concurrency_limited_refusal():
    """With the host's one slot held by a hanging try, the next call's ConcurrencyLimitError
    prints no secret."""
    limit = {"initial": 1, "initial_burst": 1, "min": 1, "max_wait": 0.1}
    with FlakyUpstream() as upstream, session_with(retry={"max_attempts": 1}, limit=limit) as s:
        path = "/p;jsessionid=jsession-s3cret/items"
        upstream.script(path, Hang(5.0), cycle=True)
        url = secret_url(upstream.base_url)
        holder = threading.Thread(target=raised, args=(lambda: s.get(url, deadline=2.0),))
        holder.start()
        for _ in range(200):  # until the hanging try holds the slot: at most 2 s
            if upstream.hits(path) == 1:
                break
            SYSTEM_CLOCK.sleep(0.01)
        exc = raised(lambda: s.get(url, deadline=2.0))
        holder.join(10.0)
        hits = upstream.hits(path)
    assert not holder.is_alive()
    assert hits == 1
    assert_sealed(exc, ConcurrencyLimitError)
    assert isinstance(exc, ConcurrencyLimitError)
    assert exc.original is None
