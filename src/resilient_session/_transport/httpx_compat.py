"""Every private attribute of httpx the library reads or writes, in one place.

Each is a fact about the httpx installed (0.28, and pydantic's httpx2 fork), not a promise of
its: tests/unit/transport/test_httpx_compat.py checks every one, so the upgrade that removes
or renames one fails there, by name, and not in the middle of a call. They serve the happy
path of ``resilient_session.httpx``, where httpx's public ways of doing the same cost more
than the rest of the try (docs/architecture.md, "Hot path").
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any, Final

import httpx

_new_object = object.__new__
_Headers = httpx.Headers
_Request = httpx.Request

# The attribute ``Response.request``'s setter sets, set here by setattr without its frame.
RESPONSE_REQUEST: Final = "_request"

# What ``Request.content`` answers once the body was read (else it raises RequestNotRead):
# here an AttributeError instead, without the property's frame.
request_content: Callable[[httpx.Request], bytes] = operator.attrgetter("_content")


def copied_request(request: httpx.Request) -> httpx.Request:
    """A shallow copy of *request*: the same body, URL and header map, its own extensions.

    Made attribute by attribute: what ``Request.__init__`` sets (``method``, ``url``,
    ``headers``, ``extensions``, ``stream``) and, once its body was read, ``_content``.
    Copying its instance dict instead first makes one (CPython keeps an instance's
    attributes without a dict until one is asked for).
    """
    # hot path: request-fields
    sent: httpx.Request = _new_object(_Request)
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


# The as-given and folded bytes of the ASCII header names set on tries (a config names a few).
_NAMES: dict[str, tuple[bytes, bytes]] = {}
_NAMES_KEPT = 64


def headers_with(headers: httpx.Headers, pairs: Iterable[tuple[str, str]]) -> httpx.Headers:
    """A copy of *headers* that also sends the ``(name, value)`` *pairs*, each set as
    ``Headers.__setitem__`` sets it (a name there already, in any case, replaced).

    The list behind an ``httpx.Headers`` holds ``(name as given, name folded, value)``, each
    bytes, in the order sent, and its encoding (None until asked for). The copy takes both
    as they stand, where ``Headers.copy()`` first decodes every name and value to settle the
    encoding; a name not there yet is appended, its bytes encoded as ``__setitem__`` encodes
    them, without ``__setitem__``'s search by comprehension. A name there already, or one not
    ASCII, is left to ``__setitem__``.
    """
    # hot path: httpx-headers
    copy: httpx.Headers = _new_object(_Headers)
    items: list[tuple[bytes, bytes, bytes]] = headers._list.copy()
    copy._list = items
    encoding = copy._encoding = headers._encoding
    for name, value in pairs:
        known = _NAMES.get(name)
        if known is None:
            if not name.isascii():
                copy[name] = value
                continue
            raw = name.encode("ascii")
            known = (raw, raw.lower())
            if len(_NAMES) < _NAMES_KEPT:
                _NAMES[name] = known
        raw, folded = known
        for item in items:
            if item[1] == folded:
                copy[name] = value
                break
        else:
            items.append((raw, folded, value.encode(encoding or "utf-8")))
    return copy


# The text of each URL recently sent, by its parsed form. A program calls a handful of URLs
# again and again; one that never repeats a URL gets a new map every 1,024, and a long URL
# (a query of kilobytes) is formatted each time rather than kept.
_TEXTS: dict[Any, str] = {}
_TEXTS_KEPT = 1024
_TEXT_KEPT_CHARS = 2048


def url_text(url: httpx.URL) -> str:
    """``str(url)``, formatted once for each URL. The key is the parsed form behind an
    ``httpx.URL`` (a NamedTuple of its parts, so hashable), which ``str(url)`` formats anew
    each time."""
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
