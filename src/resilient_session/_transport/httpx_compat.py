"""Every private attribute of httpx the library reads or writes, in one place.

Each is a fact about the httpx installed (0.28, and the httpx2 fork), not a promise of its:
tests/unit/transport/test_httpx_compat.py checks every one, so the upgrade that removes or
renames one fails there, by name, and not in the middle of a call. They serve the happy path
of ``resilient_session.httpx``, where httpx's public ways of doing the same cost more than the
rest of the try (docs/architecture.md, "Hot path").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import httpx

_new_object = object.__new__
_Headers = httpx.Headers
_Request = httpx.Request

# The attribute ``Response.request``'s setter sets, set here without the property's frame.
RESPONSE_REQUEST: Final = "_request"
# What a response holds once its body was read (``Response.read`` reads it only when absent).
RESPONSE_CONTENT: Final = "_content"


def request_body(request: httpx.Request) -> Any:
    """What *request* sends: its bytes once read (``Request.content``, without the
    property's frame and its ``hasattr``), else its stream (a generator's, a file's)."""
    # hot path: request-fields
    try:
        return request._content
    except AttributeError:
        return request.stream


def copied_request(request: httpx.Request) -> httpx.Request:
    """A shallow copy of *request*: the same body, URL and header map, its own extensions.

    Made attribute by attribute, in the order ``Request.__init__`` sets them (``method``,
    ``url``, ``headers``, ``extensions``, ``stream``, and ``_content`` once the body was
    read): copying the instance dict would first make the dict (CPython keeps an instance's
    attributes without one until it is asked for) and leave both requests' attributes slower
    to read, httpx's reads too. A subclass of ``httpx.Request`` is copied by its dict, which
    keeps whatever it adds.
    """
    # hot path: request-fields
    if type(request) is not _Request:
        sent = _new_object(type(request))
        sent.__dict__ = request.__dict__.copy()
        sent.extensions = dict(request.extensions)
        return sent
    sent = _new_object(_Request)
    sent.method = request.method
    sent.url = request.url
    sent.headers = request.headers
    sent.extensions = dict(request.extensions)
    sent.stream = request.stream
    try:
        content = request._content
    except AttributeError:
        return sent  # a body not read (a generator's, a file's): sent from its stream
    sent._content = content
    return sent


# The folded names ``http.cookiejar`` reads an answer's cookies from (``make_cookies``, by
# ``email.message.Message.get_all``, which matches a name in any case).
_COOKIE_SETTING: Final = (b"set-cookie", b"set-cookie2")


def may_set_cookie(headers: httpx.Headers) -> bool:
    """Whether ``http.cookiejar`` could find a cookie in an answer with *headers*: one is
    named ``Set-Cookie`` or ``Set-Cookie2``, or one's name is not ASCII (the email parser
    lowers names as text, and the Kelvin sign lowers to "k"). Read from the folded names of
    ``Headers._list`` as they stand, without decoding a value."""
    # hot path: cookie-skip
    for item in headers._list:
        folded = item[1]
        if folded in _COOKIE_SETTING or not folded.isascii():
            return True
    return False


# The as-given and folded bytes of the ASCII header names set on tries (a config names a few).
_NAMES: dict[str, tuple[bytes, bytes]] = {}
_NAMES_KEPT = 64


def headers_with(headers: httpx.Headers, pairs: Iterable[tuple[str, str]]) -> httpx.Headers:
    """A copy of *headers* that also sends the ``(name, value)`` *pairs*, each set as
    ``Headers.__setitem__`` sets it (a name there already, in any case, replaced).

    The list behind an ``httpx.Headers`` holds ``(name as given, name folded, value)``, each
    bytes, in the order sent, and its encoding (None until asked for). The copy takes both as
    they stand, where ``Headers.copy()`` first decodes every name and value to settle the
    encoding; a name not there yet is appended, as ``__setitem__`` appends it, without its
    search by comprehension. A name there already, or a name or value not ASCII, is left to
    ``copy()`` and ``__setitem__`` themselves.
    """
    # hot path: httpx-headers
    copy: httpx.Headers = _new_object(_Headers)
    items: list[tuple[bytes, bytes, bytes]] = headers._list.copy()
    copy._list = items
    copy._encoding = headers._encoding
    for name, value in pairs:
        if not _appended(items, name, value):
            return _set_each(headers.copy(), pairs)
    return copy


def request_with_header(request: httpx.Request, name: str, value: str) -> httpx.Request:
    """``copied_request(request)`` sending ``headers_with(request.headers, ((name, value),))``,
    made in one frame: the attempt header of each try of a call without a deadline."""
    # hot path: httpx-headers
    headers = request.headers
    known = _NAMES.get(name) or _name_bytes(name)
    if known is None or not value.isascii() or type(request) is not _Request:
        sent = copied_request(request)
        sent.headers = headers_with(headers, ((name, value),))
        return sent
    items: list[tuple[bytes, bytes, bytes]] = headers._list.copy()
    folded = known[1]
    for item in items:
        if item[1] == folded:  # set already (by the caller, or a hop before): replaced
            sent = copied_request(request)
            sent.headers = _set_each(headers.copy(), ((name, value),))
            return sent
    items.append((known[0], folded, value.encode("ascii")))
    copy: httpx.Headers = _new_object(_Headers)
    copy._list = items
    copy._encoding = headers._encoding
    # copied_request(request), written out, its header map the copy's.
    # hot path: request-fields
    sent = _new_object(_Request)
    sent.method = request.method
    sent.url = request.url
    sent.headers = copy
    sent.extensions = dict(request.extensions)
    sent.stream = request.stream
    try:
        content = request._content
    except AttributeError:
        return sent
    sent._content = content
    return sent


def _set_each(headers: httpx.Headers, pairs: Iterable[tuple[str, str]]) -> httpx.Headers:
    for name, value in pairs:
        headers[name] = value
    return headers


def _appended(items: list[tuple[bytes, bytes, bytes]], name: str, value: str) -> bool:
    """Append ``(name, value)`` to *items* as ``__setitem__`` would when the name is new to it
    and both are ASCII (True); else leave *items* as it was (False)."""
    known = _NAMES.get(name) or _name_bytes(name)
    if known is None or not value.isascii():
        return False
    folded = known[1]
    for item in items:
        if item[1] == folded:
            return False
    items.append((known[0], folded, value.encode("ascii")))
    return True


def _name_bytes(name: str) -> tuple[bytes, bytes] | None:
    """*name* as given and folded, in bytes, kept for the next try; None when not ASCII."""
    if not name.isascii():
        return None
    raw = name.encode("ascii")
    known = (raw, raw.lower())
    if len(_NAMES) < _NAMES_KEPT:
        _NAMES[name] = known
    return known


# The text of each URL recently sent, by its parsed form. A program calls a handful of URLs
# again and again; one that never repeats a URL gets a new map every 1,024, and a long URL
# (a query of kilobytes) is formatted each time rather than kept.
_TEXTS: dict[Any, str] = {}
_TEXTS_KEPT = 1024
_TEXT_KEPT_CHARS = 2048


def url_text(url: httpx.URL) -> str:
    """``str(url)``, formatted once for each URL. The key is the parsed form behind an
    ``httpx.URL`` (a NamedTuple of its parts, so hashable and compared part by part), which
    ``str(url)`` formats anew each time."""
    # hot path: url-text
    parts = url._uri_reference
    text = _TEXTS.get(parts)
    if text is None:
        text = str(url)
        if len(text) <= _TEXT_KEPT_CHARS:
            if len(_TEXTS) >= _TEXTS_KEPT:
                _TEXTS.clear()
            _TEXTS[parts] = text
    return text
