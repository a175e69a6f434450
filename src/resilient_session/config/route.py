"""Routes: the part of one host that a ``routes:`` pattern names, with a policy and state of
its own, and how a call's path finds its route."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Annotated, Final, TypeAlias

import msgspec

from .policy import HostPolicy

# A route pattern: a path, starting at its "/", in the characters a path may hold (RFC 3986
# section 3.3, percent-encoding included), with shell-style wildcards (*, ?, [...]). It ends
# where nothing follows, not at "$", which a line break before the end also satisfies: in
# Python's dialect and in JSON Schema's, which editors run.
ROUTE_KEY_PATTERN: Final = r"^/[A-Za-z0-9\-._~!$&'()*+,;=:@%/\[\]?]*(?![\s\S])"
MAX_ROUTE_LENGTH: Final = 1024
# Each call to a host with routes is matched against its patterns in turn: a host is a handful
# of endpoints, not a URL map.
MAX_ROUTES: Final = 256

RouteKey: TypeAlias = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_ROUTE_LENGTH, pattern=ROUTE_KEY_PATTERN)
]


class Route:
    """One entry of a host's ``routes:``: its pattern, and the host's policy with the entry's
    keys over it.

    The pattern is shell-style on the path (``fnmatch``: ``*`` also spans ``/``), case
    sensitive, and one ending in ``/*`` also names the path above it: ``/search/*`` is
    ``/search`` and everything under it.
    """

    __slots__ = ("_match", "pattern", "policy")

    def __init__(self, pattern: str, policy: HostPolicy) -> None:
        self.pattern = pattern
        self.policy = policy
        # Compiled once: each call to a host with routes runs it.
        self._match: Callable[[str], re.Match[str] | None] = _compile(pattern).fullmatch

    def matches(self, path: str) -> bool:
        """True when *path* (the URL's path, without its query) is in this route."""
        return self._match(path) is not None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Route):
            return NotImplemented
        return (self.pattern, self.policy) == (other.pattern, other.policy)

    def __hash__(self) -> int:
        return hash((self.pattern, self.policy))

    def __repr__(self) -> str:
        return f"Route({self.pattern!r}, {self.policy!r})"

    def __reduce__(self) -> tuple[type[Route], tuple[str, HostPolicy]]:
        return Route, (self.pattern, self.policy)


def _compile(pattern: str) -> re.Pattern[str]:
    # fnmatch's translation ends in \Z; fullmatch makes that a no-op, and keeps the
    # alternation below anchored at both ends.
    text = fnmatch.translate(pattern)
    if pattern.endswith("/*") and len(pattern) > 2:
        text = f"(?:{text})|(?:{fnmatch.translate(pattern[:-2])})"
    return re.compile(text)


def specificity(route: Route) -> tuple[int, str]:
    """The order routes are tried in: longest pattern first, then by the pattern itself, so a
    path in two routes always finds the same one."""
    return -len(route.pattern), route.pattern


def route_for(routes: tuple[Route, ...], path: str) -> Route | None:
    """The first of *routes* (in ``specificity`` order) that holds *path*, or None."""
    for route in routes:
        if route._match(path) is not None:
            return route
    return None


def path_of(url: str) -> str:
    """The path of an absolute *url*, as sent: without query or fragment, ``/`` when empty."""
    start = url.find("://")
    start = start + 3 if start >= 0 else 0
    end = len(url)
    for mark in "/?#":
        found = url.find(mark, start, end)
        if found >= 0:
            end = found
    # The authority ends at the first of "/?#"; the path runs from there to a "?" or "#".
    if end == len(url) or url[end] != "/":
        return "/"
    stop = len(url)
    for mark in "?#":
        found = url.find(mark, end, stop)
        if found >= 0:
            stop = found
    return url[end:stop]
