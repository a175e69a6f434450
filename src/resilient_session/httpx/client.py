"""ResilientClient and AsyncResilientClient: httpx's clients on a ResilientTransport, taking
``deadline=`` per request and reading a non-streamed body inside the try."""

from __future__ import annotations

import contextvars
import os
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar, Final

import httpx

from resilient_session._observe.hooks import TryHook
from resilient_session._state.fallback import FailedCall
from resilient_session._state.registry import HostRegistry
from resilient_session._state.runtime import Runtime
from resilient_session._transport.httpx_cookies import AnswerCookies, answer_cookies
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


# What httpx's own request() is, to tell it from a patched one.
_CLIENT_REQUEST: Final = httpx.Client.request
_ASYNC_CLIENT_REQUEST: Final = httpx.AsyncClient.request
# The keywords httpx's request() hands on to build_request() and send() unchanged; any other
# (cookies=, which it warns of, or a misspelt one, which it refuses) goes through it.
_STEP_KEYWORDS: Final = frozenset(
    ("content", "data", "files", "json", "params", "headers", "timeout", "extensions", "auth",
     "follow_redirects")
)  # fmt: skip
_USE_CLIENT_DEFAULT: Any = httpx.USE_CLIENT_DEFAULT


def _transport_options(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {name: kwargs[name] for name in _TRANSPORT_OPTIONS if name in kwargs}


def _reads_by_default(client: httpx.Client | httpx.AsyncClient) -> bool:
    """Whether every transport of *client* that reads READ_BODY is its own resilient one,
    which reads the body unless told otherwise: a ResilientTransport mounted beside it
    (``mounts=``) reads it only when told, so then each non-streamed send says so."""
    return not any(isinstance(mounted, ResilientTransport) for mounted in client._mounts.values())


def _runs_client_steps(cls: type, ours: type, theirs: type) -> bool:
    """True when *cls* (*ours* or a subclass) sends with *ours*' ``send``, and the first
    ``request`` and ``send`` after *ours* in its class list are httpx's client's (*theirs*):
    no class of the user's or a mixin's runs in between."""
    mro = cls.__mro__
    if next(klass for klass in mro if "send" in vars(klass)) is not ours:
        return False
    after = mro[mro.index(ours) + 1 :]
    for name in ("request", "send"):
        if next((klass for klass in after if name in vars(klass)), None) is not theirs:
            return False
    return True


class _Resilient:
    """What both resilient clients add to httpx's: the :class:`ResilientTransport` they are
    made on, its registry, and ``deadline=`` as ``ResilientSession`` takes it."""

    _resilient: ResilientTransport
    _runtime: Runtime
    _body_default: bool

    def _made_on(self, resilient: ResilientTransport, made: bool, is_async: bool) -> None:
        """Take *resilient* as this client's transport, before httpx's client is made on it:
        it reads each non-streamed body inside the try, and closes an inner transport *made*
        here, as httpx's client closes it."""
        if is_async:
            resilient._own_async_inner = made
        else:
            resilient._own_inner = made
        resilient._reads_body = True
        self._resilient = resilient
        self._runtime = resilient.registry.runtime

    def _client_made(self) -> None:
        """What follows httpx's client's own making: whether a send need tell the transport
        to read the body, and a jar that skips answers setting no cookie (httpx_cookies)."""
        client: Any = self
        self._body_default = _reads_by_default(client)
        client._cookies = AnswerCookies(client._cookies.jar)

    @property
    def registry(self) -> HostRegistry:
        return self._resilient.registry

    @property
    def cookies(self) -> httpx.Cookies:
        """As httpx's client's: the cookies sent with each request and kept from answers."""
        client: Any = self  # httpx's client, whose jar _client_made replaced
        cookies: httpx.Cookies = client._cookies
        return cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        # As httpx's setter (a Cookies given is copied, a CookieJar kept), on AnswerCookies.
        client: Any = self
        client._cookies = answer_cookies(cookies)

    def _body_told(self, stream: bool) -> contextvars.Token[bool | None] | None:
        """``READ_BODY`` set for a send of this client's when the transport would not do by
        itself what the send asks, or None when it would: it reads a body inside the try
        unless told not to (a streamed send), and is told to read one inside a streamed send
        (an auth flow's, a hook's) or beside a ResilientTransport mounted on this client."""
        if stream:
            return READ_BODY.set(False)
        if self._body_default and READ_BODY.get() is not False:
            return None
        return READ_BODY.set(True)

    def _scope(self, deadline: Any) -> DeadlineScope | None:
        runtime = self._runtime
        if deadline is not UNSET:
            return narrowed(deadline, runtime.clock, explicit=True)
        if runtime.default_deadline:
            # A host's deadline.default runs from here, not from each redirect hop's start.
            return call_scope(runtime.clock)
        return None


class ResilientClient(_Resilient, httpx.Client):
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
        resilient = ResilientTransport(
            config, registry=registry, transport=transport, clock=clock, rng=rng,
            try_hooks=try_hooks, fallback=fallback,
        )  # fmt: skip
        self._made_on(resilient, made, is_async=False)
        super().__init__(transport=resilient, **kwargs)
        self._client_made()

    # Whether request() may run httpx's request() steps itself (_runs_client_steps).
    _client_steps: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._client_steps = _runs_client_steps(cls, ResilientClient, httpx.Client)

    def request(  # adds deadline=
        self, method: str, url: httpx.URL | str, *, deadline: float | None = UNSET, **kwargs: Any
    ) -> httpx.Response:
        """As ``httpx.Client.request``, plus ``deadline=``: seconds for the whole call, every
        try, wait and redirect hop (as ``ResilientSession.request`` takes it)."""
        # A call without a deadline of any kind asks for no scope.
        if deadline is UNSET and not self._runtime.default_deadline:
            token = None
        else:
            scope = self._scope(deadline)
            token = None if scope is None else enter_scope(scope)
        try:
            if (
                self._client_steps
                and httpx.Client.request is _CLIENT_REQUEST
                and (not kwargs or kwargs.keys() <= _STEP_KEYWORDS)
            ):
                # httpx's request() steps, run here, and our send()'s for a body read in the
                # try: two frames fewer, one of them passing eleven keywords on. httpx's send
                # is the next after ours in the class list (_runs_client_steps).
                # hot path: client-steps
                if kwargs:
                    auth = kwargs.pop("auth", _USE_CLIENT_DEFAULT)
                    follow_redirects = kwargs.pop("follow_redirects", _USE_CLIENT_DEFAULT)
                    request = self.build_request(method, url, **kwargs)
                else:
                    # hot path: verb-call
                    auth = follow_redirects = _USE_CLIENT_DEFAULT
                    request = self.build_request(method, url)
                read_body = self._body_told(False)
                if read_body is None:
                    # hot path: body-default
                    return httpx.Client.send(
                        self, request, auth=auth, follow_redirects=follow_redirects
                    )
                try:
                    return httpx.Client.send(
                        self, request, auth=auth, follow_redirects=follow_redirects
                    )
                finally:
                    READ_BODY.reset(read_body)
            return super().request(method, url, **kwargs)
        finally:
            if token is not None:
                leave_scope(token)

    def send(
        self, request: httpx.Request, *, stream: bool = False, **kwargs: Any
    ) -> httpx.Response:
        token = self._body_told(stream)
        if token is None:
            return super().send(request, stream=False, **kwargs)
        try:
            return super().send(request, stream=stream, **kwargs)
        finally:
            READ_BODY.reset(token)

    # Each verb calls request() without ** when given no keyword: a call through ** with
    # nothing in it still builds a tuple of the arguments and a dict.
    # hot path: verb-call
    def get(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return self.request("GET", url, **kwargs)
        return self.request("GET", url)

    def options(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return self.request("OPTIONS", url, **kwargs)
        return self.request("OPTIONS", url)

    def head(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return self.request("HEAD", url, **kwargs)
        return self.request("HEAD", url)

    def post(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return self.request("POST", url, **kwargs)
        return self.request("POST", url)

    def put(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return self.request("PUT", url, **kwargs)
        return self.request("PUT", url)

    def patch(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return self.request("PATCH", url, **kwargs)
        return self.request("PATCH", url)

    def delete(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return self.request("DELETE", url, **kwargs)
        return self.request("DELETE", url)


class AsyncResilientClient(_Resilient, httpx.AsyncClient):
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
        resilient = ResilientTransport(
            config, registry=registry, async_transport=transport, clock=clock, rng=rng,
            try_hooks=try_hooks, fallback=fallback,
        )  # fmt: skip
        self._made_on(resilient, made, is_async=True)
        super().__init__(transport=resilient, **kwargs)
        self._client_made()

    # Whether request() may run httpx's request() steps itself (_runs_client_steps).
    _client_steps: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._client_steps = _runs_client_steps(cls, AsyncResilientClient, httpx.AsyncClient)

    async def request(  # adds deadline=
        self, method: str, url: httpx.URL | str, *, deadline: float | None = UNSET, **kwargs: Any
    ) -> httpx.Response:
        """As ``httpx.AsyncClient.request``, plus ``deadline=``."""
        # A call without a deadline of any kind asks for no scope. A scope lives in a
        # contextvar, which each task has a copy of: set and reset here, in this task, around
        # the awaited call.
        if deadline is UNSET and not self._runtime.default_deadline:
            token = None
        else:
            scope = self._scope(deadline)
            token = None if scope is None else enter_scope(scope)
        try:
            if (
                self._client_steps
                and httpx.AsyncClient.request is _ASYNC_CLIENT_REQUEST
                and (not kwargs or kwargs.keys() <= _STEP_KEYWORDS)
            ):
                # As ResilientClient.request runs them.
                # hot path: client-steps
                if kwargs:
                    auth = kwargs.pop("auth", _USE_CLIENT_DEFAULT)
                    follow_redirects = kwargs.pop("follow_redirects", _USE_CLIENT_DEFAULT)
                    request = self.build_request(method, url, **kwargs)
                else:
                    # hot path: verb-call
                    auth = follow_redirects = _USE_CLIENT_DEFAULT
                    request = self.build_request(method, url)
                read_body = self._body_told(False)
                if read_body is None:
                    # hot path: body-default
                    return await httpx.AsyncClient.send(
                        self, request, auth=auth, follow_redirects=follow_redirects
                    )
                try:
                    return await httpx.AsyncClient.send(
                        self, request, auth=auth, follow_redirects=follow_redirects
                    )
                finally:
                    READ_BODY.reset(read_body)
            return await super().request(method, url, **kwargs)
        finally:
            if token is not None:
                leave_scope(token)

    async def send(
        self, request: httpx.Request, *, stream: bool = False, **kwargs: Any
    ) -> httpx.Response:
        token = self._body_told(stream)
        if token is None:
            return await super().send(request, stream=False, **kwargs)
        try:
            return await super().send(request, stream=stream, **kwargs)
        finally:
            READ_BODY.reset(token)

    # As ResilientClient's verbs call it.
    # hot path: verb-call
    async def get(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return await self.request("GET", url, **kwargs)
        return await self.request("GET", url)

    async def options(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return await self.request("OPTIONS", url, **kwargs)
        return await self.request("OPTIONS", url)

    async def head(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return await self.request("HEAD", url, **kwargs)
        return await self.request("HEAD", url)

    async def post(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return await self.request("POST", url, **kwargs)
        return await self.request("POST", url)

    async def put(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return await self.request("PUT", url, **kwargs)
        return await self.request("PUT", url)

    async def patch(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return await self.request("PATCH", url, **kwargs)
        return await self.request("PATCH", url)

    async def delete(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if kwargs:
            return await self.request("DELETE", url, **kwargs)
        return await self.request("DELETE", url)
