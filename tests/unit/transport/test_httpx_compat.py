"""The private attributes of httpx that ``_transport/httpx_compat.py`` reads and writes are
there, and each shortcut there gives what httpx's public way gives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from resilient_session._transport import httpx_compat
from resilient_session._transport.httpx_compat import (
    RESPONSE_CONTENT,
    RESPONSE_REQUEST,
    copied_request,
    headers_with,
    request_body,
    request_with_header,
    url_text,
)
from resilient_session.httpx import ResilientClient, ResilientTransport
from resilient_session.httpx.transport import READ_BODY

pytestmark = pytest.mark.httpx

URL = "http://svc.test/items?id=1"


def test_the_private_attributes_read_are_where_the_shortcuts_look():
    """``Headers._list`` of (raw, folded, value) bytes and ``_encoding``, a read request's
    ``_content``, ``URL._uri_reference`` (hashable), and ``Response.request``'s setter's
    ``_request``."""
    request = httpx.Request("POST", URL, headers={"X-A": "1"}, content=b"body")
    assert (b"X-A", b"x-a", b"1") in request.headers._list
    assert request.headers._encoding is None
    assert request._content == b"body"
    assert hash(request.url._uri_reference) == hash(httpx.URL(URL)._uri_reference)
    response = httpx.Response(200)
    setattr(response, RESPONSE_REQUEST, request)
    assert response.request is request
    streamed = httpx.Response(200, content=iter([b"ab"]))
    assert not hasattr(streamed, RESPONSE_CONTENT)
    streamed.read()
    assert getattr(streamed, RESPONSE_CONTENT) == b"ab"


@pytest.mark.parametrize(
    "pairs",
    [
        (("X-Request-Attempt", "2; max=3"),),
        (("X-Deadline-Ms", "1500"), ("X-Request-Attempt", "1; max=3")),
        (("x-a", "replaced"),),  # a name there already, in another case
        (("X-Name", "caf\u00e9"),),  # a value not ASCII: left to __setitem__, which refuses it
    ],
)
def test_headers_with_sends_what_copy_and_setitem_send(pairs: Any):
    """The copy holds the same raw list (names as given and folded, values, order) as
    ``copy()`` then ``__setitem__`` for each pair, reads the same, and the original is left
    as it was."""
    original = httpx.Request("GET", URL, headers={"X-A": "1", "Accept": "*/*"}).headers
    before = list(original._list)
    expected = original.copy()
    try:
        for name, value in pairs:
            expected[name] = value
    except UnicodeEncodeError:
        # httpx refuses a value its headers' encoding (ASCII here) cannot hold: so does this.
        with pytest.raises(UnicodeEncodeError):
            headers_with(original, pairs)
        return
    got = headers_with(original, pairs)
    assert got._list == expected._list
    assert dict(got.items()) == dict(expected.items())
    assert original._list == before


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("X-Request-Attempt", "2; max=3"),
        ("x-a", "replaced"),  # a name there already, in another case
        ("X-Name", "caf\u00e9"),  # a value not ASCII: left to __setitem__, which refuses it
    ],
)
def test_request_with_header_is_a_copy_sending_the_header_too(name: str, value: str):
    """The copy's header list is what ``copy()`` then ``__setitem__`` make, its body, URL and
    method the request's, its extensions its own; the request is left as it was."""
    request = httpx.Request("POST", URL, headers={"X-A": "1"}, content=b"abc")
    before = list(request.headers._list)
    expected = request.headers.copy()
    try:
        expected[name] = value
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            request_with_header(request, name, value)
        return
    sent = request_with_header(request, name, value)
    assert sent is not request
    assert sent.headers._list == expected._list
    assert (sent.method, sent.url, sent.stream, sent.content) == (
        "POST",
        request.url,
        request.stream,
        b"abc",
    )
    assert sent.extensions == request.extensions
    assert sent.extensions is not request.extensions
    assert request.headers._list == before


def test_a_copied_request_shares_the_body_url_and_headers_and_owns_its_extensions():
    request = httpx.Request("PUT", URL, content=b"abc", extensions={"timeout": {"read": 1.0}})
    sent = copied_request(request)
    assert (sent.method, sent.url, sent.headers, sent.stream, sent.content) == (
        "PUT",
        request.url,
        request.headers,
        request.stream,
        b"abc",
    )
    assert sent.extensions == request.extensions
    assert sent.extensions is not request.extensions
    sent.extensions["timeout"] = {}
    assert request.extensions["timeout"] == {"read": 1.0}


def test_a_request_with_an_unread_stream_is_copied_without_a_body():
    def chunks() -> Iterator[bytes]:
        yield b"a"

    request = httpx.Request("POST", URL, content=chunks())
    sent = copied_request(request)
    assert sent.stream is request.stream
    with pytest.raises(httpx.RequestNotRead):
        _ = sent.content
    assert request_body(request) is request.stream


def test_a_request_subclass_is_copied_with_what_it_adds():
    class Tagged(httpx.Request):
        pass

    request = Tagged("GET", URL)
    request.tag = "kept"  # type: ignore[attr-defined]
    sent = copied_request(request)
    assert (type(sent), sent.tag) == (Tagged, "kept")  # type: ignore[attr-defined]


def test_url_text_is_str_of_the_url_and_kept_for_the_next_call(monkeypatch):
    monkeypatch.setattr(httpx_compat, "_TEXTS", {})
    url = httpx.URL(URL)
    assert url_text(url) == str(url) == URL
    assert {url._uri_reference: URL} == httpx_compat._TEXTS
    other = httpx.URL("http://svc.test/items?id=2")
    assert url_text(other) == "http://svc.test/items?id=2"
    assert len(httpx_compat._TEXTS) == 2


def test_a_client_call_reads_the_body_in_the_try_and_a_streamed_one_does_not():
    """The client's transport reads the body inside each try unless the send streams it
    (READ_BODY set False, or unset and the transport a bare one): a streamed send's answer
    comes back unread, a plain one's read."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter([b"x" * 10]))

    inner = httpx.MockTransport(handler)
    request = httpx.Request("GET", URL)
    assert ResilientTransport(transport=inner).start(request).stream is True
    with ResilientClient(transport=inner) as client:
        transport = client._resilient
        assert transport.start(request).stream is False
        token = READ_BODY.set(False)
        try:
            assert transport.start(request).stream is True
        finally:
            READ_BODY.reset(token)
        response = client.get(URL)
        assert (response.is_stream_consumed, response.content) == (True, b"x" * 10)
        with client.stream("GET", URL) as streamed:
            assert streamed.is_stream_consumed is False
            assert streamed.read() == b"x" * 10


def test_a_resilient_transport_mounted_beside_the_clients_own_still_reads_the_body():
    """A bare ResilientTransport mounted on a resilient client reads the body only when
    told: the client then tells it on every non-streamed send, and on none streamed."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter([b"x"]))

    mounted = ResilientTransport(transport=httpx.MockTransport(handler))
    streams: list[bool] = []
    start = mounted.start

    def recording(request: httpx.Request) -> Any:
        call = start(request)
        streams.append(call.stream)
        return call

    mounted.start = recording  # type: ignore[method-assign]
    inner = httpx.MockTransport(handler)
    with ResilientClient(transport=inner, mounts={"http://other.test": mounted}) as client:
        assert client.get("http://other.test/a").content == b"x"
        with client.stream("GET", "http://other.test/b") as streamed:
            assert streamed.read() == b"x"
        assert client.get(URL).content == b"x"  # the client's own transport: not recorded
    assert streams == [False, True]


def test_a_body_read_before_the_try_ends_is_unbound_from_the_deadline_all_the_same():
    """An answer holding its body already (a mock's) is not read again, and the deadline's
    check on its stream still ends with the try, as for a body the try read."""
    from resilient_session._pipeline.attempt import first_attempt
    from resilient_session._transport.httpx_body import CheckedStream
    from resilient_session.deadline import deadline as deadline_scope

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"held")

    with ResilientClient(transport=httpx.MockTransport(handler)) as client:
        transport = client._resilient
        with deadline_scope(5.0):
            call = transport.start(httpx.Request("GET", URL))
        assert call.deadline_at is not None
        outcome = transport._send(first_attempt(call))
    stream = outcome.response.stream  # type: ignore[union-attr]
    assert isinstance(stream, CheckedStream)
    assert (stream.rules.deadline_at, outcome.response.content) == (None, b"held")  # type: ignore[union-attr]


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b"ok")


def test_a_subclass_with_a_send_of_its_own_has_it_called_on_every_call():
    """The client runs httpx's request steps itself only when httpx's send is the next in
    the class list: a subclass's own send is called as it would be through httpx."""
    seen: list[str] = []

    class Mine(ResilientClient):
        def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            seen.append(request.method)
            return super().send(request, **kwargs)

    assert (Mine._client_steps, ResilientClient._client_steps) == (False, True)
    with Mine(transport=httpx.MockTransport(_answer)) as client:
        assert client.get(URL).content == b"ok"
        assert client.post(URL, content=b"x").content == b"ok"
    assert seen == ["GET", "POST"]


def test_a_patched_httpx_request_is_called_as_without_the_shortcut(monkeypatch):
    """httpx.Client.request patched (a tracer's, a test's) is called on every call."""
    seen: list[str] = []
    original = httpx.Client.request

    def patched(self: httpx.Client, method: str, url: Any, **kwargs: Any) -> httpx.Response:
        seen.append(method)
        return original(self, method, url, **kwargs)

    monkeypatch.setattr(httpx.Client, "request", patched)
    with ResilientClient(transport=httpx.MockTransport(_answer)) as client:
        assert client.get(URL, params={"a": "1"}).content == b"ok"
    assert seen == ["GET"]


def test_per_request_cookies_still_go_through_httpx_and_its_warning():
    """A keyword httpx's request() does more with than hand on (cookies=, which it warns
    of) takes httpx's own request(), warning and all."""
    with (
        ResilientClient(transport=httpx.MockTransport(_answer)) as client,
        pytest.warns(DeprecationWarning, match="per-request cookies"),
    ):
        response = client.get(URL, cookies={"a": "1"})
    assert (response.status_code, response.request.headers["Cookie"]) == (200, "a=1")
