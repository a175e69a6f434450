"""``resilient_session.get(url)`` as ``requests.get(url)``: a fresh session per call, on one
per-host state for the whole process, so breakers and budgets remember across calls.

A session built per call has no memory: in an outage each call starts with a closed breaker
and a full budget, and makes every try its config allows. These verbs build a fresh
``ResilientSession`` for each call (cookies are never shared, as with ``requests.get``) on one
``HostRegistry`` per process, built on first use from ``RESILIENT_SESSION_CONFIG`` or the
defaults. A forked child starts with a registry of its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec

from requests import Response

from ._state.registry import HostRegistry
from ._verbs import TypedVerbs
from .config import load
from .session import ResilientSession

P = ParamSpec("P")

_registry: HostRegistry | None = None
_creating = threading.Lock()


def shared_registry() -> HostRegistry:
    """The process's per-host state for the module verbs, built on first use.

    Raises:
        ConfigError: the file ``RESILIENT_SESSION_CONFIG`` names is invalid (asked again on
            the next call).
    """
    global _registry
    registry = _registry
    if registry is None:
        with _creating:
            registry = _registry
            if registry is None:
                registry = _registry = HostRegistry(load())
    return registry


def _forget_in_child() -> None:
    # The parent's hosts are not the child's, and a lock another thread held at the fork
    # stays held here. The parent's registry is dropped, not closed: closing a redis
    # backend's connections in the child could wait on a lock no thread will release.
    global _registry, _creating
    _registry = None
    _creating = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _on_a_fresh_session(
    verb: Callable[Concatenate[ResilientSession, P], Response], name: str
) -> Callable[P, Response]:
    """*verb* of a ``ResilientSession`` made for the call on the process's state, closed after
    it, typed as *verb* is."""

    def call(*args: P.args, **kwargs: P.kwargs) -> Response:
        with ResilientSession(registry=shared_registry()) as session:
            return verb(session, *args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = "resilient_session"
    call.__doc__ = (
        f"As ``requests.{name}``, plus ``deadline=``: one call on a fresh ``ResilientSession``"
        " (no cookies kept between calls) over the process's per-host state, so breakers and"
        " budgets hold across calls."
    )
    return call


def _as(
    method: str, request: Callable[Concatenate[ResilientSession, str | bytes, P], Response]
) -> Callable[Concatenate[ResilientSession, P], Response]:
    """*request* with its method fixed: ``requests.get`` takes ``params`` second, where
    ``Session.get`` takes it by keyword only."""

    def verb(session: ResilientSession, /, *args: P.args, **kwargs: P.kwargs) -> Response:
        return request(session, method, *args, **kwargs)

    return verb


request = _on_a_fresh_session(ResilientSession.request, "request")
get = _on_a_fresh_session(_as("GET", ResilientSession.request), "get")
options = _on_a_fresh_session(TypedVerbs.options, "options")
head = _on_a_fresh_session(TypedVerbs.head, "head")
post = _on_a_fresh_session(TypedVerbs.post, "post")
put = _on_a_fresh_session(TypedVerbs.put, "put")
patch = _on_a_fresh_session(TypedVerbs.patch, "patch")
delete = _on_a_fresh_session(TypedVerbs.delete, "delete")
