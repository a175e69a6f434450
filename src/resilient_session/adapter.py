"""ResilientAdapter: an HTTPAdapter whose ``send`` runs the tries of one request."""

from __future__ import annotations

import os
import random
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import requests
from requests.adapters import HTTPAdapter
from requests.cookies import RequestsCookieJar

from ._observe.hooks import TryHook
from ._pipeline.attempt import ANSWERED, UNDECIDED, Attempt, Call, Outcome, Verdict
from ._pipeline.call import start_call
from ._pipeline.call_stage import Run, first_and_retries
from ._pipeline.chains import call_chain
from ._pipeline.drive import Next
from ._pipeline.stages import standard_chain
from ._state.breaker import BreakerState
from ._state.fallback import FailedCall
from ._state.registry import HostRegistry
from ._transport.body import read_body
from ._transport.cap import caps_any, limit_body
from ._transport.fork import track_adapter
from ._transport.requests_wire import REQUESTS_WIRE
from ._transport.watched import watch_pools
from .clock import SYSTEM_CLOCK, Clock
from .config import Config, load
from .config.per_call import current_overrides
from .errors import ResponseTooLarge

_new_tuple = tuple.__new__
# hot path: module-constants
_RETRY = Verdict.RETRY
_CLOSED = BreakerState.CLOSED


class ResilientAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` that retries, bounds time and guards each host.

    ``send`` runs every try of one request through the pipeline; each try goes out through
    ``HTTPAdapter.send``, so tools that patch it (``responses``) see every try. requests'
    default ``Retry(0, read=False)`` stays beneath, so urllib3 never retries on its own.

    Args:
        config: as for :func:`resilient_session.config.load`; ignored when *registry* is given.
        registry: per-host state to share, for example with the session that mounts this.
        clock: the source of time; a *registry* handed in brings its own.
        rng: the source of jitter; a *registry* handed in brings its own.
        try_hooks: told of every try (:class:`resilient_session.TryHook`); a *registry* handed
            in brings its own.
        fallback: called once for a call that fails (it would raise, or ends with a 5xx, 408
            or an overload status) with a :class:`resilient_session.FailedCall`; returns a
            ``requests.Response`` to serve instead, or None (docs/degrading.md).
        **kwargs: passed to ``HTTPAdapter`` (``pool_connections``, ``pool_maxsize``, ...).
    """

    # Whether the send() after this class's in the class list is HTTPAdapter's own; set for
    # each subclass (__init_subclass__), and copied to each instance, where a try reads it.
    _next_send_is_http: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._next_send_is_http = _next_send_is_http(cls)

    def __init__(
        self,
        config: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        registry: HostRegistry | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        try_hooks: Iterable[TryHook] = (),
        fallback: Callable[[FailedCall], requests.Response | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._send_by_name = self._next_send_is_http
        if fallback is not None and not callable(fallback):
            raise TypeError(f"fallback must be callable, got {type(fallback).__name__}")
        self._fallback = fallback
        self._session: weakref.ref[requests.Session] | None = None
        # A registry made here is this adapter's to close (the redis backend's sync thread).
        self._own_registry: HostRegistry | None = None
        if registry is None:
            # The clock and random source go to the registry alone, which each call carries.
            registry = HostRegistry(load(config), clock=clock, rng=rng, try_hooks=try_hooks)
            self.attach(registry)
            self._own_registry = registry
        else:
            self.attach(registry)
        track_adapter(self)

    @property
    def registry(self) -> HostRegistry:
        return self._registry

    def attach(self, registry: HostRegistry) -> None:
        """Keep per-host state in *registry* from now on; one this adapter made is closed."""
        owned = self._own_registry
        if owned is not None and owned is not registry:
            owned.close()
            self._own_registry = None
        self._registry = registry
        # The stages are functions and read the registry's runtime from each call: the chains
        # ask the runtime only whether hooks listen and which call stages it needs, and are
        # built here for the unpickled adapter too.
        runtime = registry.runtime
        self._chain: Next = standard_chain(self._transport, runtime)
        self._calls: Run | None = call_chain(
            self._chain, self._transport, runtime, self._fallback, registry.stale
        )
        # Only a config that caps some host's responses builds capped ones (requests'
        # extension point for adapters): with every cap null, no call pays for the cap.
        if caps_any(registry.config):
            self.build_response = self._build_capped  # type: ignore[method-assign]  # per instance
        else:
            self.__dict__.pop("build_response", None)

    def serve(self, session: requests.Session) -> None:
        """Save cookies set by retried responses in *session*'s jar from now on.

        requests saves the final response's cookies (and each redirect hop's); a response that
        was retried is neither. ResilientSession calls this when it mounts the adapter.
        """
        self._session = weakref.ref(session)

    def _keep_cookies(self, cookies: RequestsCookieJar) -> None:
        # Called by the try that carries them, so before requests saves the final response's
        # own cookies, which therefore win.
        session = self._session() if self._session is not None else None
        if session is not None:
            session.cookies.update(cookies)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        # Pools whose connections put each try of a call with a deadline under the watchdog.
        watch_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        return watch_pools(super().proxy_manager_for(proxy, **proxy_kwargs))

    def _build_capped(self, req: requests.PreparedRequest, resp: Any) -> requests.Response:
        """``build_response``, holding the body to the host's ``retry.max_response_bytes``.
        A call with settings of its own is held to its own cap by ``_own_cap`` instead, from
        the policy ``start_call`` made for it (read on the call's own thread, or in a hedge's
        copy of its context: the same settings)."""
        response = super().build_response(req, resp)
        if current_overrides() is not None:
            return response
        cap = self._registry.for_url(req.url or "").policy.retry.max_response_bytes
        if cap is not None:
            limit_body(response, cap, self._registry.runtime.redact)
        return response

    def close(self) -> None:
        """As ``HTTPAdapter.close``; also releases a registry this adapter made itself."""
        super().close()
        if self._own_registry is not None:
            self._own_registry.close()

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """Send *request*, retrying as the host's policy allows; returns or raises as
        ``HTTPAdapter.send`` would for the last real try."""
        call = start_call(
            request, self._registry, REQUESTS_WIRE, stream, timeout, verify, cert, proxies
        )
        calls = self._calls
        # No call stage: the innermost run called directly, and Outcome.unwrap inlined for
        # the call that ends with a response of its own.
        # hot path: first-try-inline
        outcome = first_and_retries(self._chain, call) if calls is None else calls(call)
        # The fields read at once, not one descriptor call each.
        # hot path: unpacked-outcome
        answer, error, _, _, _, fallback = outcome
        if answer is not None and error is None and fallback is None:
            # The requests wire's answers are requests' responses.
            # hot path: no-cast
            response: requests.Response = answer  # type: ignore[assignment]
            return response
        return cast(requests.Response, outcome.unwrap())

    def _transport(self, attempt: Attempt) -> Outcome:
        """One real try: ``HTTPAdapter.send``, plus the body unless the caller streams."""
        call = attempt.call
        try:
            if self._send_by_name:
                # super().send without super()'s object, looked up on each try all the same,
                # so a patch of HTTPAdapter.send (responses) sees every try.
                # hot path: send-by-name
                response = HTTPAdapter.send(
                    self,
                    attempt.request,
                    stream=call.stream,
                    timeout=attempt.timeout,
                    verify=call.verify,
                    cert=call.cert,
                    proxies=call.proxies,
                )
            else:
                response = super().send(
                    attempt.request,
                    stream=call.stream,
                    timeout=attempt.timeout,
                    verify=call.verify,
                    cert=call.cert,
                    proxies=call.proxies,
                )
        except ResponseTooLarge as exc:
            # Judged by its status, as any answer is (a 503 is retried), and raised if final.
            return Outcome(exc.response, exc)
        except Exception as exc:  # noqa: BLE001 - errors travel as values; unwrap re-raises
            return Outcome(error=exc)
        if call.policy is not call.state.policy:
            # Settings of the call's own (resilience=, settings()): its policy's cap holds its
            # body, on any session (the host's, which _build_capped applies, may differ).
            over = self._own_cap(call, response)
            if over is not None:
                return Outcome(response, over)
        if attempt.cookies is not None:
            self._keep_cookies(attempt.cookies)
        if not call.stream:
            try:
                if call.deadline_at is None:
                    _ = response.content  # no deadline to read under: requests' own read
                else:
                    read_body(response, call.deadline_at, call.runtime)
            except ResponseTooLarge as exc:
                return Outcome(response, exc)
            except Exception as exc:  # noqa: BLE001 - same: classified, then re-raised as is
                response.close()
                return Outcome(error=exc)
        # hot path: happy (an answer and no error hold here already)
        if response.status_code < 400:
            # answered(response), written out: a frame less on every happy try.
            # hot path: answered
            return _new_tuple(Outcome, (response, None, ANSWERED, None, _CLOSED, None))
        # hot path: positional-tuples
        return _new_tuple(Outcome, (response, None, UNDECIDED, None, None, None))

    def _own_cap(self, call: Call, response: requests.Response) -> ResponseTooLarge | None:
        """Hold *response*'s body to the cap of *call*'s own policy, if any; the error of a
        body that declares more, its connection closed unread."""
        cap = call.policy.retry.max_response_bytes
        if cap is None:
            return None
        try:
            limit_body(response, cap, call.runtime.redact)
        except ResponseTooLarge as exc:
            return exc
        return None

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = dict(super().__getstate__())  # type: ignore[misc]  # not in the stubs
        runtime = self._registry.runtime
        state["_resilience"] = (self._registry.config, runtime.clock, runtime.rng, self._fallback)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Config survives pickling; breakers and budgets start afresh (requests' __attrs__ rule).
        config, clock, rng, self._fallback = state.pop("_resilience")
        super().__setstate__(state)  # type: ignore[misc]  # requests' stubs omit it
        self._send_by_name = self._next_send_is_http
        self._session = None  # the session that unpickles this mounts it again
        self._own_registry = None
        registry = HostRegistry(config, clock=clock, rng=rng)
        self.attach(registry)
        self._own_registry = registry
        track_adapter(self)


def _next_send_is_http(cls: type) -> bool:
    """True when the first ``send`` after ResilientAdapter's in *cls*'s class list is
    ``HTTPAdapter``'s: no other adapter class (a mounted adapter's, ``_adopted_adapters.py``)
    has a ``send`` of its own to run in between."""
    mro = cls.__mro__
    for klass in mro[mro.index(ResilientAdapter) + 1 :]:
        if "send" in vars(klass):
            return klass is HTTPAdapter
    return False
