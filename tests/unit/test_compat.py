"""Every private attribute of requests and urllib3 the library uses exists in the installed
versions and means what ``_compat`` takes it to mean: the upgrade that changes one fails here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.cookies import RequestsCookieJar
from requests.structures import CaseInsensitiveDict
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.util import Timeout as Urllib3Timeout

from resilient_session import _compat


def test_a_header_map_is_its_store_of_folded_names():
    """CaseInsensitiveDict keeps folded name -> (name as given, value); headers_of wraps one."""
    headers = CaseInsensitiveDict({"X-Trace": "1"})
    assert dict(_compat.header_store(headers)) == {"x-trace": ("X-Trace", "1")}
    rebuilt = _compat.headers_of(_compat.header_store(headers).copy())
    rebuilt["Accept"] = "*/*"
    assert (dict(rebuilt), dict(headers)) == ({"X-Trace": "1", "Accept": "*/*"}, {"X-Trace": "1"})


def test_a_urllib3_timeout_keeps_the_parts_it_was_made_with():
    """_connect and _read hold the parts, a total= timeout's included, timer unstarted."""
    assert _compat.timeout_parts(Urllib3Timeout(connect=1.5, read=7)) == (1.5, 7)
    assert _compat.timeout_parts(Urllib3Timeout(total=3, read=2)) == (
        Urllib3Timeout.DEFAULT_TIMEOUT,
        2,
    )


def test_a_prepared_request_keeps_the_jar_its_cookie_header_came_from():
    """_cookies is the jar prepare_cookies built the Cookie header from."""
    jar = RequestsCookieJar()
    jar.set("session", "abc", domain="svc.test", path="/")
    request = requests.Request("GET", "http://svc.test/", cookies=jar).prepare()
    kept = _compat.request_cookies(request)
    assert kept is not None
    assert (kept.get("session"), request.headers["Cookie"]) == ("abc", "session=abc")


def test_content_kept_reads_as_requests_own():
    """_content and _content_consumed are what Response.content reads and leaves behind."""
    response = requests.Response()
    assert _compat.content_read(response) is False
    _compat.keep_content(response, b"body")
    assert (response.content, response.text, _compat.content_read(response)) == (
        b"body",
        "body",
        True,
    )


def test_an_adapter_keeps_its_pool_settings():
    """HTTPAdapter keeps its pool arguments, as its pickled state does."""
    adapter = HTTPAdapter(pool_connections=3, pool_maxsize=7, pool_block=True)
    assert _compat.pool_settings(adapter) == (3, 7, True)
    assert {"_pool_connections", "_pool_maxsize", "_pool_block"} <= set(HTTPAdapter.__attrs__)


def test_a_pool_managers_idle_connections_are_readable_without_its_locks():
    """PoolManager.pools._container holds the pools; each pool's idle connections sit in
    pool.queue (None for a slot never filled)."""
    manager = urllib3.PoolManager(num_pools=2, maxsize=2)
    pool = manager.connection_from_url("http://127.0.0.1:9/")
    connection = pool._get_conn()
    pool._put_conn(connection)
    assert list(_compat.idle_connections(manager)) == [connection]
    manager.clear()


def test_the_connection_hooks_the_watched_pool_overrides_exist():
    """_new_conn and _validate_conn are urllib3's per-connection hooks that
    _transport/watched.py overrides: a rename would silently unwatch every try."""
    assert callable(HTTPConnectionPool._new_conn)
    assert callable(HTTPConnectionPool._validate_conn)


def test_a_urllib3_response_names_its_connection_and_a_detached_socket():
    """HTTPResponse keeps the connection it releases as _connection; a response http.client
    detached from its connection still reads through _fp.fp.raw._sock."""
    import socket
    from io import BufferedReader

    from urllib3.connection import HTTPConnection
    from urllib3.response import HTTPResponse

    connection = HTTPConnection("127.0.0.1", 9)
    response = HTTPResponse(body=b"", preload_content=False, connection=connection)
    assert _compat.response_connection(response) is connection
    left, right = socket.socketpair()
    try:
        reader = BufferedReader(socket.SocketIO(left, "rb"))

        class _HttpClientResponse:
            fp = reader

            def read(self, amount: int = -1) -> bytes:
                return b""

        raw = HTTPResponse(body=cast(Any, _HttpClientResponse()), preload_content=False)
        assert _compat.detached_socket(raw) is left
    finally:
        left.close()
        right.close()


def test_every_read_of_a_urllib3_response_body_goes_through_raw_read():
    """_raw_read(amt, *, read1) is the one place HTTPResponse takes body bytes from http.client,
    for read, read1 and stream alike: _transport/cap.py counts the wire there. A rename would
    leave a compressed body's wire uncounted."""
    import inspect
    import io

    from urllib3.response import HTTPResponse

    parameters = inspect.signature(HTTPResponse._raw_read).parameters
    assert list(parameters) == ["self", "amt", "read1"]
    assert parameters["read1"].kind is inspect.Parameter.KEYWORD_ONLY
    asked: list[tuple[int | None, bool]] = []

    class Counted(HTTPResponse):
        def _raw_read(self, amt: int | None = None, *, read1: bool = False) -> bytes:
            asked.append((amt, read1))
            return super()._raw_read(amt, read1=read1)

    reads: list[Callable[[HTTPResponse], bytes]] = [
        lambda r: r.read(),
        lambda r: r.read(3),
        lambda r: r.read1(3),
        lambda r: next(r.stream(3)),
    ]
    for read in reads:
        asked.clear()
        read(Counted(body=io.BytesIO(b"body"), preload_content=False))
        assert asked, "a read that bypassed _raw_read"


def test_session_request_is_the_steps_resilient_session_runs_itself():
    """ResilientSession.request runs requests.Session.request's steps itself (so it knows the
    prepared request is the call's alone): a Request of the same arguments, prepare_request,
    merge_environment_settings, then send with timeout and allow_redirects. A requests
    release that adds a step fails here."""
    import inspect
    import re

    source = inspect.getsource(requests.Session.request)
    body = source[source.index('"""', source.index('"""') + 3) + 3 :]
    calls = re.findall(r"\b(?:self\.)?([A-Za-z_]+)\(", body)
    steps = [name for name in calls if name not in {"isinstance", "decode", "upper", "update"}]
    assert [step for step in steps if step != "_is_prepared"] == [
        "Request",
        "prepare_request",
        "merge_environment_settings",
        "send",
    ]
    for keyword in ("data or {}", "params or {}", "proxies or {}", '"allow_redirects"'):
        assert keyword in body


def test_http_client_reads_a_status_line_and_skips_a_header_section():
    """HTTPResponse._read_status reads one status line as (version, status, reason), and
    _read_headers one header section up to its blank line: _transport/interim.py reads past
    informational answers with them. A rename would hand every 103 to the caller again."""
    import http.client
    import io

    class _Reading(http.client.HTTPResponse):
        def __init__(self, wire: bytes) -> None:
            self.fp = io.BufferedReader(io.BytesIO(wire))
            self.debuglevel = 0

    reading = _Reading(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert _compat.read_status_line(reading) == ("HTTP/1.1", 103, "Early Hints\r\n")
    assert _compat.skip_header_section(reading.fp) == [b"Link: </a>\r\n", b"\r\n"]
    assert _compat.read_status_line(reading)[1] == 200
    assert "_read_status" in vars(http.client.HTTPResponse)


def test_a_urllib3_response_reads_its_body_through_http_clients_buffered_reader():
    """HTTPResponse keeps http.client's response as _fp, which takes the body from its
    buffered reader fp: _transport/cap.py counts the chunked framing there. A response urllib3
    was handed a file has none."""
    import http.client
    import io
    import socket

    from urllib3.response import HTTPResponse

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        inner = http.client.HTTPResponse(ours, method="GET")
        inner.begin()
        raw = HTTPResponse(body=inner, preload_content=False)
        held = _compat.body_reader(raw)
        assert held is not None
        assert held[0] is inner
        assert isinstance(held[1], io.BufferedReader)
        assert held[1].peek(2)[:2] == b"ok"
        assert raw.read() == b"ok"
    assert _compat.body_reader(HTTPResponse(body=io.BytesIO(b"ok"), preload_content=False)) is None
