"""inbound.trusted_networks: the caller's deadline and retry intent are adopted from peers inside
the listed networks only; null adopts them from every caller."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from resilient_session import ConfigError
from resilient_session._pipeline.intent import caller_retries
from resilient_session.config import load
from resilient_session.deadline import current_scope
from resilient_session.inbound import ASGIMiddleware, WSGIMiddleware
from resilient_session.testing import FakeClock

HEADERS = {"HTTP_X_REQUEST_TIMEOUT_MS": "500", "HTTP_X_REQUEST_ATTEMPT": "1; max=2"}
INTERNAL = {"inbound": {"trusted_networks": ["10.0.0.0/8", "192.168.7.0/24", "fd00::/8"]}}


class Seen:
    """Whether each request's handler ran under an adopted deadline and one-try rule."""

    def __init__(self) -> None:
        self.adopted: list[tuple[bool, bool]] = []

    def record(self) -> None:
        self.adopted.append((current_scope() is not None, caller_retries()))


def _wsgi(seen: Seen, config: Any, clock: FakeClock) -> WSGIMiddleware:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.record()
        start_response("200 OK", [])
        return [b"ok"]

    return WSGIMiddleware(app, config, clock=clock)


def _serve_wsgi(middleware: WSGIMiddleware, peer: object) -> None:
    environ: dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", **HEADERS}
    if peer is not None:
        environ["REMOTE_ADDR"] = peer
    body = middleware(environ, lambda status, headers, exc_info=None: lambda data: None)
    assert b"".join(body) == b"ok"


@pytest.mark.parametrize(
    ("peer", "adopted"),
    [
        ("10.1.2.3", True),
        ("192.168.7.200", True),
        ("192.168.8.1", False),
        ("127.0.0.1", False),
        ("fd00::1", True),
        ("fd12:3456::9", True),
        ("2001:db8::1", False),
        ("::1", False),
        ("::ffff:10.1.2.3", True),
        ("::ffff:127.0.0.1", False),
        ("fe80::1%eth0", False),
        (None, False),
        ("", False),
        ("not an address", False),
        ("10.1.2.3:5000", False),
        ("10.1.2", False),
        ("unix:/run/app.sock", False),
    ],
    ids=repr,
)
def test_wsgi_adopts_from_peers_inside_the_trusted_networks_only(clock, peer, adopted):
    """REMOTE_ADDR inside a listed network (v4, v6, v4-mapped v6) adopts the caller's deadline
    and one-try rule; any other address, a malformed one or none runs under the local policy."""
    seen = Seen()
    _serve_wsgi(_wsgi(seen, INTERNAL, clock), peer)
    assert seen.adopted == [(adopted, adopted)]
    assert (current_scope(), caller_retries()) == (None, False)


@pytest.mark.parametrize("peer", ["203.0.113.9", "2001:db8::1", None, "garbage"], ids=repr)
def test_wsgi_null_trusts_every_caller(clock, peer):
    """Without trusted_networks (null, the default) every caller's headers are adopted, with
    or without a peer address."""
    seen = Seen()
    _serve_wsgi(_wsgi(seen, {}, clock), peer)
    assert seen.adopted == [(True, True)]


def test_wsgi_an_empty_list_trusts_no_caller(clock):
    """trusted_networks: [] adopts from nobody, not even loopback."""
    seen = Seen()
    middleware = _wsgi(seen, {"inbound": {"trusted_networks": []}}, clock)
    _serve_wsgi(middleware, "127.0.0.1")
    _serve_wsgi(middleware, "::1")
    assert seen.adopted == [(False, False), (False, False)]


def test_wsgi_a_single_address_is_a_network_of_one(clock):
    """A bare address is its /32 or /128: that peer is trusted, its neighbour is not."""
    seen = Seen()
    middleware = _wsgi(seen, {"inbound": {"trusted_networks": ["10.0.0.5", "::1"]}}, clock)
    for peer in ("10.0.0.5", "10.0.0.6", "::1", "::2"):
        _serve_wsgi(middleware, peer)
    assert seen.adopted == [(True, True), (False, False), (True, True), (False, False)]


def _asgi(seen: Seen, config: Any, clock: FakeClock) -> ASGIMiddleware:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.record()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return ASGIMiddleware(app, config, clock=clock)


_MISSING = object()


def _serve_asgi(middleware: ASGIMiddleware, client: object) -> None:
    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [(b"x-request-timeout-ms", b"500"), (b"x-request-attempt", b"1; max=2")],
    }
    if client is not _MISSING:
        scope["client"] = client
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(middleware(scope, receive, send))
    assert sent[0]["status"] == 200


@pytest.mark.parametrize(
    ("client", "adopted"),
    [
        (("10.9.8.7", 40000), True),
        (["10.9.8.7", 40000], True),
        (("fd00::7", 40000), True),
        (("172.16.0.1", 40000), False),
        (("2001:db8::7", 40000), False),
        (None, False),
        (_MISSING, False),
        ((), False),
        ((b"10.9.8.7", 40000), False),
        (("not an address", 1), False),
        ("10.9.8.7", False),
    ],
    ids=repr,
)
def test_asgi_adopts_from_clients_inside_the_trusted_networks_only(clock, client, adopted):
    """scope["client"][0] inside a listed network adopts; any other, a malformed client or
    none runs under the local policy."""
    seen = Seen()
    _serve_asgi(_asgi(seen, INTERNAL, clock), client)
    assert seen.adopted == [(adopted, adopted)]


def test_asgi_null_trusts_every_caller(clock):
    """Without trusted_networks, a request with no client still adopts its caller's values."""
    seen = Seen()
    middleware = _asgi(seen, {}, clock)
    _serve_asgi(middleware, _MISSING)
    _serve_asgi(middleware, ("203.0.113.9", 1))
    assert seen.adopted == [(True, True), (True, True)]


@pytest.mark.parametrize(
    ("networks", "path", "text"),
    [
        (["10.0.0.0/8", "10.0.0.300/8"], r"inbound\.trusted_networks\[1\]", "10.0.0.300/8"),
        (["10.0.0.1/8"], r"inbound\.trusted_networks\[0\]", "host bits set"),
        (["fd00::/8", "fd00::/129"], r"inbound\.trusted_networks\[1\]", "fd00::/129"),
        (["localhost"], r"inbound\.trusted_networks\[0\]", "localhost"),
        ([""], r"inbound\.trusted_networks\[0\]", ""),
        ([10], r"inbound\.trusted_networks\[0\]", "str"),
        ("10.0.0.0/8", r"inbound\.trusted_networks", "array"),
    ],
)
def test_a_bad_network_is_a_config_error_naming_its_index(networks, path, text):
    """A network the ipaddress module cannot read, or with host bits set, is a ConfigError
    naming inbound.trusted_networks[i] at load."""
    with pytest.raises(ConfigError, match=path) as raised:
        load({"inbound": {"trusted_networks": networks}})
    assert text in str(raised.value)


def test_good_networks_load_as_given():
    """v4, v6 and bare addresses load; null is the default."""
    networks = ["10.0.0.0/8", "fd00::/8", "192.0.2.1", "::1"]
    assert load({"inbound": {"trusted_networks": networks}}).inbound.trusted_networks == tuple(
        networks
    )
    assert load({}).inbound.trusted_networks is None
