"""ResilientClient and AsyncResilientClient: httpx's clients on a ResilientTransport, taking
``deadline=`` per request and reading a non-streamed body inside the try."""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import httpx

from resilient_session._observe.hooks import TryHook
from resilient_session._state.fallback import FailedCall
from resilient_session._state.registry import HostRegistry
from resilient_session.clock import SYSTEM_CLOCK, Clock
from resilient_session.config import Config
from resilient_session.deadline import DeadlineScope, call_scope, narrowed
from resilient_session.deadline import enter as enter_scope
from resilient_session.deadline import leave as leave_scope

from .transport import READ_BODY, ResilientTransport


class _Unset:
    """The default of ``deadline=``: distinct from None, which means "no deadline"."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()

# What configures httpx's own transport: given to a client with a transport of its own, httpx
# ignores them, so the clients here hand them to the inner transport they make.
_TRANSPORT_OPTIONS = ("verify", "cert", "trust_env", "http1", "http2", "limits")

ConfigSource = Config | Mapping[str, Any] | str | os.PathLike[str] | None


def _transport_options(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {name: kwargs[name] for name in _TRANSPORT_OPTIONS if name in kwargs}


class _Deadlines:
    """``deadline=`` as ``ResilientSession`` takes it: the scope a call runs in."""

    _resilient: ResilientTransport

    def _scope(self, deadline: Any) -> DeadlineScope | None:
        runtime = self._resilient.registry.runtime
        if deadline is not UNSET:
            return narrowed(deadline, runtime.clock, explicit=True)
        if runtime.default_deadline:
            # A host's deadline.default runs from here, not from each redirect hop's start.
            return call_scope(runtime.clock)
        return None


class ResilientClient(_Deadlines, httpx.Client):
    """An ``httpx.Client`` on a :class:`ResilientTransport`: retries, deadlines and per-host
    guards for every request, and the body of a non-streamed one read inside the try.

    Args:
        config: as for :func:`resilient_session.config.load`; ignored when *registry* is given.
        registry: per-host state to share (with a ``ResilientSession``, say).
        transport: the inner transport each try goes out on; by default httpx's own, with
            ``retries=0`` and this client's ``verify``, ``cert``, ``http2`` and ``limits``.
        clock, rng, try_hooks: as for ``ResilientSession``; a *registry* brings its own.
        fallback: as for ``ResilientSession``: called once for a call that fails.
        **kwargs: passed to ``httpx.Client``.
    """

    def __init__(
        self,
        config: ConfigSource = None,
        *,
        registry: HostRegistry | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        try_hooks: Iterable[TryHook] = (),
        fallback: Callable[[FailedCall], httpx.Response | None] | None = None,
        **kwargs: Any,
    ) -> None:
        made = transport is None
        if transport is None:
            transport = httpx.HTTPTransport(retries=0, **_transport_options(kwargs))
        self._resilient = ResilientTransport(
            config, registry=registry, transport=transport, clock=clock, rng=rng,
            try_hooks=try_hooks, fallback=fallback,
        )  # fmt: skip
        # Made here, so closed with the resilient transport, which httpx's client closes.
        self._resilient._own_inner = made
        super().__init__(transport=self._resilient, **kwargs)

    @property
    def registry(self) -> HostRegistry:
        return self._resilient.registry

    def request(  # adds deadline=
        self, method: str, url: httpx.URL | str, *, deadline: float | None = UNSET, **kwargs: Any
    ) -> httpx.Response:
        """As ``httpx.Client.request``, plus ``deadline=``: seconds for the whole call, every
        try, wait and redirect hop (as ``ResilientSession.request`` takes it)."""
        scope = self._scope(deadline)
        if scope is None:
            return super().request(method, url, **kwargs)
        token = enter_scope(scope)
        try:
            return super().request(method, url, **kwargs)
        finally:
            leave_scope(token)

    def send(
        self, request: httpx.Request, *, stream: bool = False, **kwargs: Any
    ) -> httpx.Response:
        if stream:
            return super().send(request, stream=True, **kwargs)
        token = READ_BODY.set(True)
        try:
            return super().send(request, stream=False, **kwargs)
        finally:
            READ_BODY.reset(token)

    def get(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def options(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("OPTIONS", url, **kwargs)

    def head(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("HEAD", url, **kwargs)

    def post(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def patch(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)


class AsyncResilientClient(_Deadlines, httpx.AsyncClient):
    """An ``httpx.AsyncClient`` on a :class:`ResilientTransport`, as :class:`ResilientClient`
    is an ``httpx.Client``; waits are awaited on the registry's clock, never blocking the loop.

    Args:
        config: as for :func:`resilient_session.config.load`; ignored when *registry* is given.
        registry: per-host state to share (with a ``ResilientSession`` or a sync client).
        transport: the inner async transport each try goes out on; by default httpx's own,
            with ``retries=0`` and this client's ``verify``, ``cert``, ``http2``, ``limits``.
        clock, rng, try_hooks: as for ``ResilientSession``; a *registry* brings its own.
        fallback: as for ``ResilientSession``: called once for a call that fails; a
            coroutine function is awaited.
        **kwargs: passed to ``httpx.AsyncClient``.
    """

    def __init__(
        self,
        config: ConfigSource = None,
        *,
        registry: HostRegistry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        try_hooks: Iterable[TryHook] = (),
        fallback: Callable[[FailedCall], httpx.Response | Awaitable[httpx.Response | None] | None]
        | None = None,
        **kwargs: Any,
    ) -> None:
        made = transport is None
        if transport is None:
            transport = httpx.AsyncHTTPTransport(retries=0, **_transport_options(kwargs))
        self._resilient = ResilientTransport(
            config, registry=registry, async_transport=transport, clock=clock, rng=rng,
            try_hooks=try_hooks, fallback=fallback,
        )  # fmt: skip
        # Made here, so closed with the resilient transport, which httpx's client closes.
        self._resilient._own_async_inner = made
        super().__init__(transport=self._resilient, **kwargs)

    @property
    def registry(self) -> HostRegistry:
        return self._resilient.registry

    async def request(  # adds deadline=
        self, method: str, url: httpx.URL | str, *, deadline: float | None = UNSET, **kwargs: Any
    ) -> httpx.Response:
        """As ``httpx.AsyncClient.request``, plus ``deadline=``."""
        scope = self._scope(deadline)
        if scope is None:
            return await super().request(method, url, **kwargs)
        # The scope lives in a contextvar, which each task has a copy of: set and reset here,
        # in this task, around the awaited call.
        token = enter_scope(scope)
        try:
            return await super().request(method, url, **kwargs)
        finally:
            leave_scope(token)

    async def send(
        self, request: httpx.Request, *, stream: bool = False, **kwargs: Any
    ) -> httpx.Response:
        if stream:
            return await super().send(request, stream=True, **kwargs)
        token = READ_BODY.set(True)
        try:
            return await super().send(request, stream=False, **kwargs)
        finally:
            READ_BODY.reset(token)

    async def get(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("GET", url, **kwargs)

    async def options(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("OPTIONS", url, **kwargs)

    async def head(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("HEAD", url, **kwargs)

    async def post(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("POST", url, **kwargs)

    async def put(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("PUT", url, **kwargs)

    async def patch(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("PATCH", url, **kwargs)

    async def delete(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        return await self.request("DELETE", url, **kwargs)
