"""The stale store: the last good answer of each GET and HEAD, kept in memory to serve, marked,
when a later call to its host fails (``fallback.stale`` in docs/configuration.md).

Transport-neutral: it keeps plain values (status, headers, body bytes) and is told whether the
body was streamed, so requests and httpx callers share it.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

from resilient_session.clock import Clock
from resilient_session.config.policy import StalePolicy

STORED_METHODS: Final = frozenset({"GET", "HEAD"})
# RFC 9110 section 15.1: the statuses heuristically cacheable that a stale copy can stand for;
# 204 and 206 are left out (no body to serve; a part of one).
STORED_STATUSES: Final = frozenset({200, 203, 300, 301, 404, 410})
# One user's answer is never served to another: these make a request someone's.
CREDENTIAL_HEADERS: Final = ("authorization", "cookie", "proxy-authorization")
# Never replayed: a served copy must not set a cookie a second time. Hop-by-hop fields
# described the connection the answer came on (RFC 9111 section 3.1: a cache drops them).
DROPPED_HEADERS: Final = frozenset(
    {
        "set-cookie",
        "set-cookie2",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

HeaderValue: TypeAlias = str | bytes
Headers: TypeAlias = tuple[tuple[str, str], ...]
# (method, URL, credentials digest): the answers of one request, whatever their Vary.
_Primary: TypeAlias = tuple[str, str, bytes]
# The primary key and a digest of the values of the request headers the answer's Vary names.
_Key: TypeAlias = tuple[_Primary, bytes]


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    """An answer as kept: what a served copy is built from."""

    status: int
    # As the answer had them, ``Set-Cookie`` and hop-by-hop fields left out.
    headers: Headers
    body: bytes
    # ``clock.monotonic()`` when it was kept.
    stored_at: float
    # Seconds it was already old when it arrived (its ``Age``), 0 without one.
    initial_age: float
    # Its own ``Cache-Control: stale-if-error=N``, or None.
    stale_if_error: float | None
    # What it counts against the byte bounds: body, kept headers, method and URL.
    size: int


@dataclass(frozen=True, slots=True)
class StaleHit:
    """An answer found for a failed call, and how old it is now."""

    answer: StoredAnswer
    # Whole seconds, as the ``Age`` header carries them (RFC 9111 section 5.1).
    age: int

    def served_headers(self) -> Headers:
        """The answer's headers with ``Age`` set to its age now, as a cache adds it."""
        kept = tuple((name, value) for name, value in self.answer.headers if name.lower() != "age")
        return (*kept, ("Age", str(self.age)))


@dataclass(frozen=True, slots=True)
class StaleFigures:
    """What ``health()`` shows of one host's share of the store, or of the whole store."""

    entries: int
    bytes: int
    # Fallbacks served, by any source, and of them the stale answers.
    fallbacks: int
    served: int
    # Answers dropped to make room, least recently used first.
    evictions: int


class StaleScope:
    """One host's (or route's) share of the store and its counts: kept with the host's state,
    guarded by the store's lock."""

    __slots__ = ("bytes", "evictions", "fallbacks", "order", "served")

    def __init__(self) -> None:
        # The scope's keys, least recently used first.
        self.order: OrderedDict[_Key, None] = OrderedDict()
        self.bytes = 0
        self.fallbacks = 0
        self.served = 0
        self.evictions = 0


class _Entry:
    __slots__ = ("answer", "scope")

    def __init__(self, answer: StoredAnswer, scope: StaleScope) -> None:
        self.answer = answer
        self.scope = scope


class StaleStore:
    """The answers a registry keeps, least recently used out past ``max_bytes``.

    One lock guards every entry and every scope's counts; it is never held across I/O, and
    the digests of a request's headers are taken before it.
    """

    def __init__(self, max_bytes: int, clock: Clock) -> None:
        self.max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()
        # The Vary names the latest answer of each request gave, lower case and sorted, and
        # the keys of that request's answers kept.
        self._vary: dict[_Primary, tuple[str, ...]] = {}
        self._variants: dict[_Primary, set[_Key]] = {}
        self._bytes = 0
        self._evictions = 0
        # A digest keyed per store: equal credentials give equal digests only within it.
        self._salt = os.urandom(16)

    def keep(
        self,
        scope: StaleScope,
        policy: StalePolicy,
        method: str,
        url: str,
        request_headers: Mapping[str, HeaderValue],
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        *,
        streamed: bool,
    ) -> bool:
        """Keep an answer to serve later, unless a rule says not to; True when kept.

        Args:
            scope: the host's (or route's) share, which ``policy.max_bytes`` bounds.
            policy: the call's ``fallback.stale``.
            method: the request's method.
            url: the URL as sent.
            request_headers: the request's headers as sent, credentials included.
            status: the answer's status.
            headers: the answer's headers.
            body: the body as the caller reads it.
            streamed: the caller reads the body after the call (``stream=True``): never kept.
        """
        method = method.upper()
        if streamed or method not in STORED_METHODS or status not in STORED_STATUSES:
            return False
        if len(body) > policy.max_entry_bytes:
            return False
        answer_fields = _lowered(headers)
        request_fields = _lowered(request_headers)
        directives = _cache_control(answer_fields.get("cache-control"))
        # RFC 9111 section 5.2.1.5: a request's no-store forbids keeping its answer too.
        if "no-store" in directives or "no-store" in _cache_control(
            request_fields.get("cache-control")
        ):
            return False
        vary = _vary_names(answer_fields.get("vary"))
        if vary is None:
            return False
        kept = tuple(
            (str(name), str(value))
            for name, value in headers.items()
            if str(name).lower() not in DROPPED_HEADERS
        )
        size = (
            len(body) + sum(len(name) + len(value) for name, value in kept) + len(method) + len(url)
        )
        if size > min(policy.max_bytes, self.max_bytes):
            return False
        primary = (method, url, self._digest(request_fields, CREDENTIAL_HEADERS))
        key = (primary, self._digest(request_fields, vary))
        answer = StoredAnswer(
            status,
            kept,
            bytes(body),
            self._clock.monotonic(),
            _seconds(answer_fields.get("age")) or 0.0,
            _seconds(directives.get("stale-if-error")),
            size,
        )
        with self._lock:
            if self._vary.get(primary, vary) != vary:
                # The server varies on other headers now: the older variants would never match.
                for other in list(self._variants[primary]):
                    self._drop(other)
            elif key in self._entries:
                self._drop(key)
            self._vary[primary] = vary
            self._variants.setdefault(primary, set()).add(key)
            self._entries[key] = _Entry(answer, scope)
            scope.order[key] = None
            scope.bytes += size
            self._bytes += size
            while scope.bytes > policy.max_bytes:
                self._evict(next(iter(scope.order)))
            while self._bytes > self.max_bytes:
                self._evict(next(iter(self._entries)))
        return True

    def find(
        self,
        policy: StalePolicy,
        method: str,
        url: str,
        request_headers: Mapping[str, HeaderValue],
    ) -> StaleHit | None:
        """The answer kept for this request, if it is young enough to serve: its age within
        ``policy.max_stale`` or its own ``stale-if-error``."""
        method = method.upper()
        if method not in STORED_METHODS:
            return None
        request_fields = _lowered(request_headers)
        primary = (method, url, self._digest(request_fields, CREDENTIAL_HEADERS))
        with self._lock:
            vary = self._vary.get(primary)
        if vary is None:
            return None
        key = (primary, self._digest(request_fields, vary))
        now = self._clock.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            answer = entry.answer
            age = now - answer.stored_at + answer.initial_age
            if age > max(policy.max_stale, answer.stale_if_error or 0.0):
                return None
            self._entries.move_to_end(key)
            entry.scope.order.move_to_end(key)
        return StaleHit(answer, int(max(age, 0.0)))

    def served(self, scope: StaleScope, *, stale: bool) -> None:
        """Count a fallback served for *scope*'s host: a stale answer, or another source's."""
        with self._lock:
            scope.fallbacks += 1
            if stale:
                scope.served += 1

    def figures(self, scope: StaleScope | None = None) -> StaleFigures:
        """*scope*'s share and counts; without one, the whole store's."""
        with self._lock:
            if scope is not None:
                return StaleFigures(
                    len(scope.order), scope.bytes, scope.fallbacks, scope.served, scope.evictions
                )
            return StaleFigures(len(self._entries), self._bytes, 0, 0, self._evictions)

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (a parent's thread may have held this one)."""
        self._lock = threading.Lock()

    def _digest(self, fields: Mapping[str, HeaderValue], names: Iterable[str]) -> bytes:
        """A keyed digest of the values of *names* in *fields*: never the values themselves,
        which may be credentials. Each part is length-prefixed, so no two lists collide."""
        digest = hashlib.blake2b(key=self._salt, digest_size=16)
        for name in names:
            value = fields.get(name)
            raw = name.encode("ascii", "replace")
            digest.update(len(raw).to_bytes(4, "big") + raw)
            if value is None:
                digest.update(b"\xff\xff\xff\xff")
                continue
            data = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(4, "big") + data)
        return digest.digest()

    def _drop(self, key: _Key) -> None:
        entry = self._entries.pop(key)
        entry.scope.order.pop(key, None)
        entry.scope.bytes -= entry.answer.size
        self._bytes -= entry.answer.size
        primary = key[0]
        variants = self._variants[primary]
        variants.discard(key)
        if not variants:
            del self._variants[primary]
            del self._vary[primary]

    def _evict(self, key: _Key) -> None:
        scope = self._entries[key].scope
        self._drop(key)
        scope.evictions += 1
        self._evictions += 1


def _lowered(headers: Mapping[str, HeaderValue]) -> dict[str, HeaderValue]:
    """Header names in lower case: a plain dict, requests' and httpx's mappings read alike."""
    return {str(name).lower(): value for name, value in headers.items()}


def _text(value: HeaderValue | None) -> str:
    if value is None:
        return ""
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _cache_control(value: HeaderValue | None) -> dict[str, str | None]:
    """The directives of a ``Cache-Control`` value, names in lower case (RFC 9111 section 5.2)."""
    directives: dict[str, str | None] = {}
    for part in _text(value).split(","):
        name, sep, argument = part.partition("=")
        name = name.strip().lower()
        if name:
            directives.setdefault(name, argument.strip().strip('"') if sep else None)
    return directives


def _vary_names(value: HeaderValue | None) -> tuple[str, ...] | None:
    """The request headers an answer varies on, lower case and sorted; None for ``*``, which
    no later request can be shown to match (RFC 9110 section 12.5.5)."""
    names = {name.strip().lower() for name in _text(value).split(",") if name.strip()}
    if "*" in names:
        return None
    return tuple(sorted(names))


def _seconds(value: HeaderValue | str | None) -> float | None:
    """A delta-seconds value (RFC 9111 section 1.2.2): digits only, else None."""
    text = _text(value).strip()
    if not text.isdigit() or not text.isascii():
        return None
    # RFC 9111 section 1.2.2: a value past 2**31 is taken as 2**31 (and int() of a very long
    # string of digits would raise).
    return float(2**31) if len(text) > 10 else float(min(int(text), 2**31))
