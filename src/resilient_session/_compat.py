"""Every private attribute of requests, urllib3 and http.client the library reads or writes, in
one place.

Each is a fact about the versions installed, not a promise of theirs: tests/unit/
test_compat.py checks every one against the installed requests, urllib3 and Python, so the
upgrade that removes or renames one fails there, by name, and not in the middle of a call.
urllib3's private connection hooks that ``_transport/watched.py`` overrides (``_new_conn``,
``_validate_conn``), the response's ``_raw_read`` that ``_transport/cap.py`` overrides, and
http.client's ``_read_status`` that ``_transport/interim.py`` overrides, are pinned by the
same test.
"""

from __future__ import annotations

import http.client
import io
import operator
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.cookies import RequestsCookieJar
from requests.structures import CaseInsensitiveDict
from urllib3.util import Timeout as Urllib3Timeout

HeaderStore = OrderedDict[str, tuple[str, str]]

_new_object = object.__new__

# http.client's reading of one status line, as ``(version, status, reason)``, which
# ``_transport/interim.py`` overrides; and of one header section, the one it skips after
# ``100 Continue`` (Python 3.10 on).
read_status_line: Callable[[http.client.HTTPResponse], tuple[str, int, str]] = (
    http.client.HTTPResponse._read_status  # type: ignore[attr-defined]
)
skip_header_section: Callable[[Any], list[bytes]] = http.client._read_headers  # type: ignore[attr-defined]


# The map behind a CaseInsensitiveDict: folded name -> (name as given, value), requests 2.0
# on. An attrgetter, not a function: no frame on the try that writes X-Request-Attempt.
header_store: Callable[[CaseInsensitiveDict[str]], HeaderStore] = operator.attrgetter("_store")


def headers_of(store: HeaderStore) -> CaseInsensitiveDict[str]:
    """Headers that hold *store* as their map, built without copying it."""
    headers: CaseInsensitiveDict[str] = _new_object(CaseInsensitiveDict)
    headers._store = store  # type: ignore[attr-defined]
    return headers


def timeout_parts(timeout: Urllib3Timeout) -> tuple[Any, Any]:
    """The connect and read parts a urllib3 ``Timeout`` was made with. Its public properties
    raise for a ``total=`` timeout whose timer has not started; these can be read any time."""
    return timeout._connect, timeout._read


def request_cookies(request: requests.PreparedRequest) -> RequestsCookieJar | None:
    """The jar a prepared request's Cookie header was built from (``prepare_cookies``)."""
    jar: RequestsCookieJar | None = request._cookies  # type: ignore[attr-defined]
    return jar


def keep_content(response: requests.Response, body: bytes) -> None:
    """Leave *body* as the response's read content, as ``Response.content`` leaves it."""
    response._content = body
    response._content_consumed = True  # type: ignore[attr-defined]


def content_read(response: requests.Response) -> bool:
    """Whether the response's body was read into ``content`` already (True when unknown)."""
    return bool(getattr(response, "_content_consumed", True))


def response_connection(response: Any) -> Any:
    """The connection a urllib3 ``HTTPResponse`` reads from and releases, or None once it
    has released it."""
    return response._connection


def detached_socket(raw: Any) -> Any:
    """The socket a urllib3 response still reads through once http.client detached it from
    its connection (a ``Connection: close`` response, as its headers end), or None."""
    socket_io = getattr(getattr(getattr(raw, "_fp", None), "fp", None), "raw", None)
    return getattr(socket_io, "_sock", None)


def body_reader(raw: Any) -> tuple[Any, Any] | None:
    """The http.client response under a urllib3 response, and the buffered reader it takes
    the body from (its ``fp``, head already read), or None when there is none (a body urllib3
    was handed as a file, or one already closed)."""
    inner = getattr(raw, "_fp", None)
    reader = getattr(inner, "fp", None)
    if not isinstance(reader, io.BufferedReader):
        return None
    return inner, reader


def pool_settings(adapter: HTTPAdapter) -> tuple[int, int, bool]:
    """What ``HTTPAdapter.__init__`` built the adapter's pool manager with (its pickled state,
    from which its ``__setstate__`` rebuilds the manager)."""
    return (
        adapter._pool_connections,  # type: ignore[attr-defined]
        adapter._pool_maxsize,  # type: ignore[attr-defined]
        adapter._pool_block,  # type: ignore[attr-defined]
    )


def idle_connections(manager: Any) -> Iterator[Any]:
    """The idle connections of every pool of a urllib3 pool manager, read without the locks
    behind which urllib3 keeps them (for a forked child, where a lock a parent's thread held
    stays held). Nothing, if urllib3 keeps them some other way."""
    container = getattr(getattr(manager, "pools", None), "_container", None)
    if container is None:
        return
    for pool in list(container.values()):
        for conn in list(getattr(getattr(pool, "pool", None), "queue", None) or ()):
            if conn is not None:
                yield conn
