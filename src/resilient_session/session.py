"""ResilientSession: a requests.Session whose adapters retry safely and bound time."""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import requests
from requests import Request, Response
from requests.adapters import BaseAdapter, HTTPAdapter

from ._adopted_adapters import (
    Around,
    Fallback,
    around_of,
    is_default,
    resilient_get_adapter,
    wrap_mounted,
)
from ._observe.hooks import TryHook
from ._state.registry import HostHealth, HostRegistry
from ._transport.fork import track_session
from ._transport.owned import mark_owned
from ._verbs import TypedVerbs
from .adapter import ResilientAdapter
from .clock import SYSTEM_CLOCK, Clock
from .config import Config, load
from .config.per_call import enter_call, leave
from .deadline import call_scope, narrowed
from .deadline import enter as enter_scope
from .deadline import leave as leave_scope

if TYPE_CHECKING:
    from requests.cookies import RequestsCookieJar
    from requests.models import _JSON
    from requests.sessions import (
        _Auth,
        _Cert,
        _Data,
        _Files,
        _HeadersUpdateMapping,
        _HooksInput,
        _Params,
        _TextMapping,
        _Timeout,
        _Verify,
    )


class _Unset:
    """The default of ``deadline=``: distinct from None, which means "no deadline"."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()

# requests.Session.request as imported: a patch of it later (instrumentation) is then seen,
# and followed, on every call.
_SESSION_REQUEST: Final = requests.Session.request


class ResilientSession(TypedVerbs):
    """A drop-in ``requests.Session``: write it where ``requests.Session()`` was.

    Every call is retried only when that is safe, waits with full-jitter backoff or the
    upstream's Retry-After, stays within its deadline, and goes through a per-host retry
    budget and circuit breaker.

    Args:
        config: a path to a YAML file, a mapping, a loaded ``Config``, or None: the file in
            ``RESILIENT_SESSION_CONFIG`` when set, else the built-in defaults.
        clock: the source of time (tests pass ``resilient_session.testing.FakeClock``).
        rng: the source of jitter.
        registry: per-host state to share with another session; by default each session
            has its own, and ``close()`` releases it (the redis backend's sync thread). It
            brings its own clock and random source, which then replace *clock* and *rng*.
        try_hooks: told of every try once its decision is final, after the ``http.try``
            event (:class:`resilient_session.TryHook`; docs/observability.md). A *registry*
            handed in brings its own (``HostRegistry(try_hooks=...)``).
        fallback: called once for a call that fails (it would raise, or ends with a 5xx, 408
            or an overload status) with a :class:`resilient_session.FailedCall` saying why;
            returns a ``requests.Response`` to serve instead, or None to let the call end as
            it would (docs/degrading.md). Every adapter of this session uses it.
        **kwargs: passed on to the next class in the class list, so ``ResilientSession``
            combines with another ``requests.Session`` subclass in either order, for
            example ``class Api(ResilientSession, OAuth2Session)`` built as
            ``Api(client_id=..., token=...)``.

    Raises:
        ConfigError: the configuration is invalid; the message names the key.

    Example::

        with ResilientSession() as session:
            session.get("https://api.example.com/items", deadline=2.0)
    """

    __attrs__ = [*requests.Session.__attrs__, "config", "_clock", "_rng", "_fallback"]  # noqa: RUF012

    # Whether the request() after this class's in the class list is requests' own, whose
    # steps request() then runs itself; set for each subclass (__init_subclass__).
    _next_request_is_requests: bool = True
    # Whether this session has its per-host state yet: requests' __init__ mounts, and
    # __init__ and unpickling set config, before it does. A class default, read instead of
    # self.__dict__, whose use would give the instance a dict of its own and slow every
    # attribute read on it.
    _has_state: bool = False
    # The fallback= callable every adapter this session mounts or wraps is given.
    _fallback: Fallback | None = None

    def __init__(
        self,
        config: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        registry: HostRegistry | None = None,
        try_hooks: Iterable[TryHook] = (),
        fallback: Fallback | None = None,
        **kwargs: Any,
    ) -> None:
        # The rest belong to the next class in the list (OAuth2Session's client_id, token, ...).
        super().__init__(**kwargs)
        if registry is not None and config is not None:
            raise ValueError("pass config or registry, not both: a registry carries its config")
        if registry is not None and try_hooks:
            raise ValueError("pass try_hooks to the registry: a registry carries its hooks")
        self.config: Config = registry.config if registry is not None else load(config)
        # A registry handed in belongs to the caller, who closes it.
        self._owns_registry = registry is None
        # Kept for the registry a new config gets (session.config = ...).
        self._try_hooks = tuple(try_hooks)
        self.registry = (
            registry
            if registry is not None
            else HostRegistry(self.config, clock=clock, rng=rng, try_hooks=self._try_hooks)
        )
        # The registry owns them; kept here only for pickling and for ``deadline=``'s instant.
        runtime = self.registry.runtime
        self._clock = runtime.clock
        self._rng = runtime.rng
        self._default_spans = runtime.default_deadline
        self._fallback = fallback
        for prefix in ("https://", "http://"):
            self.mount(prefix, ResilientAdapter(registry=self.registry, fallback=fallback))
        self._has_state = True
        # Any other a class before this one in the class list mounted had no state to join yet.
        self._wrap_mounted()
        track_session(self)

    # requests' own parameters, spelled out: a *args/**kwargs pass-through repacks them on every
    # call. They are passed on by keyword, so a Session subclass after this one in the class
    # list whose request takes (method, url, **kwargs) (OAuth2Session, CacheMixin) gets them.
    # tests/functional/test_session.py keeps this list equal to requests.Session.request's,
    # and the types are those of requests' own stubs.
    def request(
        self,
        method: str | bytes,
        url: str | bytes,
        params: _Params | None = None,
        data: _Data | None = None,
        headers: _HeadersUpdateMapping | None = None,
        cookies: RequestsCookieJar | _TextMapping | None = None,
        files: _Files | None = None,
        auth: _Auth | None = None,
        timeout: _Timeout | None = None,
        allow_redirects: bool = True,
        proxies: _TextMapping | None = None,
        hooks: _HooksInput | None = None,
        stream: bool | None = None,
        verify: _Verify | None = None,
        cert: _Cert | None = None,
        json: _JSON | None = None,
        # Callers see float | None: UNSET is how "not given" is told apart from None, never a
        # value to pass. Annotations cost nothing at run time, so the call stays as fast.
        deadline: float | None = UNSET,  # type: ignore[assignment]
        resilience: Mapping[str, Any] | None = None,
    ) -> Response:
        """As ``requests.Session.request``, plus ``deadline=``: seconds for the whole call,
        and ``resilience=``: settings of this call's own.

        The deadline spans every try, wait and redirect hop. It replaces the host's configured
        ``deadline.default`` for this call; an enclosing ``with deadline()`` still caps it.
        ``deadline=None`` switches the configured default off for this call. Without it, the
        configured default spans the call too: each hop's host's default runs from the call's
        start, and a hop never gets longer than an earlier hop's host gave the call.

        ``resilience={"retry": {"max_attempts": 1}}`` sets the per-call sections (``retry``,
        ``timeout``, ``deadline``, ``hedging``, ``fallback``) over each hop's host's, key by
        key, and over any enclosing ``with resilient_session.settings(...)``.

        Raises:
            TypeError: *deadline* is not a number (``True`` is not) and not None.
            ValueError: *deadline* is zero, negative, NaN, infinite or above
                ``resilient_session.deadline.MAX_DEADLINE`` (10**9 s).
            ConfigError: *resilience* names a per-host section (``breaker``, ``budget``,
                ``throttle``, ``limit``, ``state``), an unknown key or a bad value; raised
                before anything is sent.
        """
        if resilience is not None:
            # Validated here, so a bad key raises before anything is sent; the call below
            # reads the settings from the contextvar as a settings() block's.
            settings_token = enter_call(resilience)
            try:
                return self.request(
                    method, url, params=params, data=data, headers=headers, cookies=cookies,
                    files=files, auth=auth, timeout=timeout, allow_redirects=allow_redirects,
                    proxies=proxies, hooks=hooks, stream=stream, verify=verify, cert=cert,
                    json=json, deadline=deadline,
                )  # fmt: skip
            finally:
                leave(settings_token)
        if deadline is not UNSET:  # type: ignore[comparison-overlap]  # identity: isinstance costs more
            scope = narrowed(deadline, self._clock, explicit=True)
        elif self._default_spans:
            # A host's deadline.default runs from here, not from each redirect hop's start.
            scope = call_scope(self._clock)
        else:
            if self._next_request_is_requests and requests.Session.request is _SESSION_REQUEST:
                # requests.Session.request's own steps, run here: the request prepared is then
                # known to be this call's alone, and the call skips a frame that passes
                # sixteen keywords on.
                # hot path: session-steps
                if isinstance(url, bytes):
                    url = url.decode("utf-8")
                prepared = self.prepare_request(
                    Request(
                        method=method.upper(), url=url, headers=headers, files=files,
                        data=data or {}, json=json, params=params or {}, auth=auth,
                        cookies=cookies, hooks=hooks,
                    )
                )  # fmt: skip
                mark_owned(prepared)  # hot path: owned
                settings = self.merge_environment_settings(
                    prepared.url, proxies or {}, stream, verify, cert
                )
                return self.send(
                    prepared, timeout=timeout, allow_redirects=allow_redirects, **settings
                )
            return super().request(
                method, url, params=params, data=data, headers=headers, cookies=cookies,
                files=files, auth=auth, timeout=timeout, allow_redirects=allow_redirects,
                proxies=proxies, hooks=hooks, stream=stream, verify=verify, cert=cert,
                json=json,
            )  # fmt: skip
        token = enter_scope(scope)
        try:
            return super().request(
                method, url, params=params, data=data, headers=headers, cookies=cookies,
                files=files, auth=auth, timeout=timeout, allow_redirects=allow_redirects,
                proxies=proxies, hooks=hooks, stream=stream, verify=verify, cert=cert,
                json=json,
            )  # fmt: skip
        finally:
            leave_scope(token)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._next_request_is_requests = _next_request_is_requests(cls)

    def mount(self, prefix: str | bytes, adapter: BaseAdapter) -> None:
        """As ``requests.Session.mount``: ``session.adapters`` and ``get_adapter`` show
        *adapter* as mounted, in requests' prefix order.

        A ResilientAdapter keeps its own state and saves the cookies of retried responses in
        this session's jar. Any other ``HTTPAdapter`` (a pool size, a TLS context, a subclass)
        becomes the transport of this session's pipeline: every try goes out through its own
        ``send`` and pools, and this session's retries, deadlines, guards and ``health()``
        cover it. Other adapters (``file://``, a test double) are left as they are.
        """
        super().mount(prefix, adapter)
        if isinstance(adapter, ResilientAdapter):
            adapter.serve(self)
        elif isinstance(adapter, HTTPAdapter) and self._has_state:
            # requests' own __init__ mounts two before this session has state; they are replaced.
            wrap_mounted(adapter, self, self.registry, self._fallback)

    def _wrap_mounted(self) -> None:
        for adapter in self.adapters.values():
            if isinstance(adapter, ResilientAdapter):
                adapter.serve(self)
            elif isinstance(adapter, HTTPAdapter):
                wrap_mounted(adapter, self, self.registry, self._fallback)

    def __setattr__(self, name: str, value: Any) -> None:
        # requests-mock's Mocker sets get_adapter on the session for each send and sets it back
        # after (_adopted_adapters.py): the adapter it hands out then runs inside the pipeline. Only
        # attribute writes pay for these checks, and a call makes none on the session.
        if name == "get_adapter":
            if is_default(self, value):
                self.__dict__.pop("get_adapter", None)
                return
            value = resilient_get_adapter(value, self._around)
        elif name == "config" and self._has_state:
            # Set before the state exists: by __init__, and by unpickling (__setstate__).
            self._reconfigure(value)
            return
        super().__setattr__(name, value)

    def _reconfigure(self, source: Config | Mapping[str, Any] | str | os.PathLike[str]) -> None:
        """``session.config = source``: the next call runs on the new config's policies, on
        per-host state built anew for them (docs/decisions.md says why nothing carries over)."""
        if not self._owns_registry:
            raise ValueError(
                "this session runs on a registry handed to it, which carries the config (and "
                "may serve other sessions): build a HostRegistry with the new config and a "
                "session on it"
            )
        config = load(source)
        old = self.registry
        registry = HostRegistry(config, clock=self._clock, rng=self._rng, try_hooks=self._try_hooks)
        for adapter in self.adapters.values():
            on_state = adapter if isinstance(adapter, ResilientAdapter) else around_of(adapter)
            # A ResilientAdapter mounted with a config of its own keeps it.
            if on_state is not None and on_state.registry is old:
                on_state.attach(registry)
        if getattr(self, "_kept_around", None) is not None:
            delattr(self, "_kept_around")  # a mocker's, on the old state
        super().__setattr__("config", config)
        self.registry = registry
        self._default_spans = registry.runtime.default_deadline
        old.close()

    def _around(self, adapter: BaseAdapter) -> ResilientAdapter:
        """A ResilientAdapter sending each try through *adapter*, on this session's per-host
        state; one is kept for the adapter last seen (a mocker's, for each of its sends)."""
        kept: tuple[BaseAdapter, Around] | None = self.__dict__.get("_kept_around")
        if kept is not None and kept[0] is adapter:
            return kept[1]
        around = Around(
            adapter,
            registry=self.registry,
            clock=self._clock,
            rng=self._rng,
            fallback=self._fallback,
        )
        around.serve(self)
        self.__dict__["_kept_around"] = (adapter, around)
        return around

    def health(self) -> dict[str, HostHealth]:
        """Per host: breaker state, tokens left, calls, tries, retries and failures so far;
        a host with routes is followed by each route used so far (``HostHealth.route``)."""
        return self.registry.health()

    def close(self) -> None:
        """As ``requests.Session.close``; also releases the per-host state's backend (the
        redis backend's sync thread and connections) when this session made it."""
        super().close()
        if self._owns_registry:
            self.registry.close()

    def __copy__(self) -> ResilientSession:
        """A shallow copy, as ``copy.copy`` makes of a ``requests.Session``: a second handle
        on the same headers, cookies and adapters, and so on the same per-host state.

        ``copy.deepcopy`` (or pickling) gives an independent session with fresh state instead.
        """
        clone = self.__class__.__new__(self.__class__)
        clone.__dict__.update(self.__dict__)
        track_session(clone)
        return clone

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # type: ignore[misc]  # requests' stubs omit it
        # One fresh registry for the adapters this session mounted, as at construction.
        self.registry = HostRegistry(self.config, clock=self._clock, rng=self._rng)
        self._owns_registry = True
        self._try_hooks = ()  # hooks are not pickled: the registry above has none either
        self._has_state = True
        self._default_spans = self.registry.runtime.default_deadline
        track_session(self)
        for adapter in self.adapters.values():
            if isinstance(adapter, ResilientAdapter) and adapter.registry.config == self.config:
                adapter.attach(self.registry)
        self._wrap_mounted()


def _next_request_is_requests(cls: type) -> bool:
    """True when the first ``request`` after ResilientSession's in *cls*'s class list is
    ``requests.Session.request``: no other Session subclass (OAuth2Session, CacheMixin) has
    a ``request`` of its own to run in between."""
    mro = cls.__mro__
    after = mro[mro.index(ResilientSession) + 1 :]
    for klass in after:
        if "request" in vars(klass):
            return klass is requests.Session
    return False
