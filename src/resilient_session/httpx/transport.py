"""ResilientTransport: one httpx transport, sync and async, whose every request runs the tries
of one call through the same stages as ``ResilientAdapter.send``."""

from __future__ import annotations

import contextvars
import os
import random
from collections.abc import Iterable, Mapping
from typing import Any, cast

import httpx

from resilient_session._observe.hooks import TryHook
from resilient_session._pipeline.aio import AsyncNext, async_chain
from resilient_session._pipeline.aio.calls import AsyncRun, afirst_and_retries
from resilient_session._pipeline.aio.chains import async_call_chain
from resilient_session._pipeline.attempt import (
    ANSWERED,
    UNDECIDED,
    Attempt,
    Call,
    Outcome,
    Verdict,
)
from resilient_session._pipeline.call import start_call
from resilient_session._pipeline.call_stage import Run, first_and_retries
from resilient_session._pipeline.chains import call_chain
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.stages import standard_chain
from resilient_session._state.breaker import BreakerState
from resilient_session._state.registry import HostRegistry
from resilient_session._transport.httpx_body import checked, unbound_deadline
from resilient_session._transport.httpx_compat import RESPONSE_CONTENT, RESPONSE_REQUEST, url_text
from resilient_session._transport.httpx_errors import ResponseTooLarge
from resilient_session._transport.httpx_pool_guard import poisons_on_cancel, send_guarded
from resilient_session._transport.httpx_wire import HTTPX_WIRE, extension_timeout, with_timeout
from resilient_session.clock import SYSTEM_CLOCK, Clock
from resilient_session.config import Config, load

_new_tuple = tuple.__new__


def _shielded() -> Any:
    """A scope no cancellation reaches, for the cleanup a cancelled try still owes."""
    import anyio

    return anyio.CancelScope(shield=True)


_RETRY = Verdict.RETRY
_ANSWERED = ANSWERED
_CLOSED = BreakerState.CLOSED

# Whether a try reads the body: set by ResilientClient and AsyncResilientClient around a
# streamed send (False) and a send made inside one (True). Unset, the transport's own default
# holds (``_reads_body``): a bare transport returns at the headers, as httpx's own do, and one
# a resilient client made reads the body inside each try, so the client's calls set nothing.
READ_BODY: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "resilient_session_httpx_read_body", default=None
)


class ResilientTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An httpx transport that retries, bounds time and guards each host, for
    ``httpx.Client`` and ``httpx.AsyncClient`` alike.

    Each try goes out through the inner transport (by default httpx's own with
    ``retries=0``, made on first use), so respx and pytest-httpx see every try, and httpx
    never retries beneath. Client options that configure a transport (``verify``, ``http2``,
    ``limits``) do not reach one handed to a client: give them to the inner transport.

    Args:
        config: as for :func:`resilient_session.config.load`; ignored when *registry* is given.
        registry: per-host state to share, with a ``ResilientSession`` for example: one
            breaker, budget, throttle and limit per host for both.
        transport: the inner sync transport; closed by :meth:`close` only when made here.
        async_transport: the inner async transport; closed by :meth:`aclose` only when made
            here.
        clock: the source of time; a *registry* handed in brings its own.
        rng: the source of jitter; a *registry* handed in brings its own.
        fallback: called once for a call that fails, sync or async, as
            ``ResilientSession(fallback=...)``'s: a response it returns is served, marked.
            A coroutine function answers the async path's calls, awaited. Stale answers
            are served as the host's ``fallback.stale`` says, for calls whose body the
            client read.
        try_hooks: told of every try; a *registry* handed in brings its own.
    """

    def __init__(
        self,
        config: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        registry: HostRegistry | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        fallback: Any = None,
        try_hooks: Iterable[TryHook] = (),
    ) -> None:
        if fallback is not None and not callable(fallback):
            raise TypeError(f"fallback must be callable, got {type(fallback).__name__}")
        self._fallback = fallback
        self._own_registry: HostRegistry | None = None
        if registry is None:
            registry = HostRegistry(load(config), clock=clock, rng=rng, try_hooks=try_hooks)
            self._own_registry = registry
        self._registry = registry
        self._inner = transport
        # What is made here is closed here; ResilientClient hands over what it made too.
        self._own_inner = transport is None
        self._async_inner = async_transport
        self._own_async_inner = async_transport is None
        # Whether a call reads the body inside its tries when READ_BODY is unset.
        self._reads_body = False
        # A cancelled try must not leave httpcore's pool a stuck connection (httpx_pool_guard).
        self._guard_pool = async_transport is not None and poisons_on_cancel(async_transport)
        runtime = registry.runtime
        self._chain: Next = standard_chain(self._send, runtime)
        self._calls: Run | None = call_chain(
            self._chain, self._send, runtime, fallback, registry.stale
        )
        # The async chains, built on the first async call: a sync-only user never loads them.
        self._async: AsyncNext | None = None
        self._async_calls: AsyncRun | None = None

    @property
    def registry(self) -> HostRegistry:
        return self._registry

    # -- sync --------------------------------------------------------------------------------

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send *request*, retrying as the host's policy allows; returns or raises as the
        inner transport would for the last real try."""
        call = self.start(request)
        calls = self._calls
        # hot path: first-try-inline
        outcome = first_and_retries(self._chain, call) if calls is None else calls(call)
        # The fields read at once, not one descriptor call each.
        # hot path: unpacked-outcome
        answer, error, _, _, _, fallback = outcome
        if answer is not None and error is None and fallback is None:
            # The httpx wire's answers are httpx's responses.
            # hot path: no-cast
            response: httpx.Response = answer  # type: ignore[assignment]
            return response
        return cast(httpx.Response, outcome.unwrap())

    def start(self, request: httpx.Request) -> Call:
        """The call *request* starts: its timeouts the extension's (httpx's client always sets
        one; none, or every part None, is the host's default), its body read inside the try
        when a resilient client asked for it."""
        timeout: Any = request.extensions.get("timeout")
        if timeout is not None:
            for value in timeout.values():
                if value is not None:
                    break
            else:
                timeout = None
        # hot path: request-fields
        try:
            body: Any = request._content  # request_body(request), written out
        except AttributeError:
            body = request.stream  # a generator or a file: read once, so sent once
        read_body = READ_BODY.get()
        if read_body is None:
            read_body = self._reads_body
        return start_call(
            request,
            self._registry,
            HTTPX_WIRE,
            stream=not read_body,
            timeout=timeout,
            url=url_text(request.url),
            body=body,
        )

    def _inner_transport(self) -> httpx.BaseTransport:
        inner = self._inner
        if inner is None:
            inner = self._inner = httpx.HTTPTransport(retries=0)
        return inner

    def _send(self, attempt: Attempt) -> Outcome:
        """One real try on the inner transport, plus the body when the call reads it."""
        call = attempt.call
        sent = attempt.request
        timeout = attempt.timeout
        # hot path: extension-timeout
        if sent.extensions.get("timeout") is not timeout:
            sent = with_timeout(sent, extension_timeout(timeout))
        inner = self._inner
        if inner is None:
            inner = self._inner_transport()
        try:
            response = inner.handle_request(sent)
        except Exception as exc:  # noqa: BLE001 - errors travel as values; unwrap re-raises
            return Outcome(error=exc)
        # What the cookie rules of a retried answer read, and an error reading the body names.
        setattr(response, RESPONSE_REQUEST, sent)  # hot path: answer-request
        stream = call.stream
        deadline_at = None if stream else call.deadline_at
        # hot path: unchecked-body
        if deadline_at is None and call.policy.retry.max_response_bytes is None:
            rules = None
        else:
            rules = checked(call, sent, response, deadline_at)
            over = rules.declared_over() if rules is not None else None
            if over is not None:
                response.close()
                return Outcome(response, over)
        if not stream and not hasattr(response, RESPONSE_CONTENT):
            # hot path: read-body (a body already read, as a mock's or a canned one's, is not
            # read again through read()'s frame)
            try:
                response.read()
            except ResponseTooLarge as exc:
                response.close()
                return Outcome(response, exc)
            except Exception as exc:  # noqa: BLE001 - same: classified, then re-raised as is
                response.close()
                return Outcome(error=exc)
        if rules is not None and not stream:
            unbound_deadline(response)
        # hot path: happy (an answer and no error hold here already)
        if response.status_code < 400:
            # answered(response), written out.
            # hot path: answered
            return _new_tuple(Outcome, (response, None, _ANSWERED, None, _CLOSED, None))
        return _new_tuple(Outcome, (response, None, UNDECIDED, None, None, None))

    # -- async -------------------------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """``handle_request`` for ``httpx.AsyncClient``: the same stages and per-host state,
        each awaited, every wait on the clock without blocking the loop."""
        chain = self._async
        if chain is None:
            chain = self._build_async()
        call = self.start(request)
        calls = self._async_calls
        # hot path: first-try-inline
        outcome = await (afirst_and_retries(chain, call) if calls is None else calls(call))
        # The fields read at once, not one descriptor call each.
        # hot path: unpacked-outcome
        answer, error, _, _, _, fallback = outcome
        if answer is not None and error is None and fallback is None:
            # The httpx wire's answers are httpx's responses.
            # hot path: no-cast
            response: httpx.Response = answer  # type: ignore[assignment]
            return response
        return cast(httpx.Response, outcome.unwrap())

    def _build_async(self) -> AsyncNext:
        registry = self._registry
        runtime = registry.runtime
        chain = self._async = async_chain(self._asend, runtime)
        self._async_calls = async_call_chain(
            chain, self._asend, runtime, self._fallback, registry.stale
        )
        return chain

    def _async_inner_transport(self) -> httpx.AsyncBaseTransport:
        inner = self._async_inner
        if inner is None:
            inner = self._async_inner = httpx.AsyncHTTPTransport(retries=0)
            self._guard_pool = True
        return inner

    async def _asend(self, attempt: Attempt) -> Outcome:
        """``_send``, awaited on the inner async transport."""
        call = attempt.call
        sent = attempt.request
        timeout = attempt.timeout
        # hot path: extension-timeout
        if sent.extensions.get("timeout") is not timeout:
            sent = with_timeout(sent, extension_timeout(timeout))
        inner = self._async_inner
        if inner is None:
            inner = self._async_inner_transport()
        try:
            if self._guard_pool:
                response = await send_guarded(inner, sent)
            else:
                response = await inner.handle_async_request(sent)
        except Exception as exc:  # noqa: BLE001 - errors travel as values; unwrap re-raises
            return Outcome(error=exc)
        setattr(response, RESPONSE_REQUEST, sent)  # hot path: answer-request
        stream = call.stream
        deadline_at = None if stream else call.deadline_at
        # hot path: unchecked-body
        if deadline_at is None and call.policy.retry.max_response_bytes is None:
            rules = None
        else:
            rules = checked(call, sent, response, deadline_at, awaited=True)
            over = rules.declared_over() if rules is not None else None
            if over is not None:
                await response.aclose()
                return Outcome(response, over)
        if not stream and not hasattr(response, RESPONSE_CONTENT):
            # hot path: read-body
            try:
                await response.aread()
            except ResponseTooLarge as exc:
                await response.aclose()
                return Outcome(response, exc)
            except Exception as exc:  # noqa: BLE001 - same: classified, then re-raised as is
                await response.aclose()
                return Outcome(error=exc)
            except BaseException:
                # Cancelled mid-body: the connection goes, never back to the pool half read.
                with _shielded():
                    await response.aclose()
                raise
        if rules is not None and not stream:
            unbound_deadline(response)
        # hot path: happy (an answer and no error hold here already)
        if response.status_code < 400:
            # answered(response), written out.
            # hot path: answered
            return _new_tuple(Outcome, (response, None, _ANSWERED, None, _CLOSED, None))
        return _new_tuple(Outcome, (response, None, UNDECIDED, None, None, None))

    async def aclose(self) -> None:
        """Close the inner async transport if made here, and a registry made here."""
        if self._own_async_inner and self._async_inner is not None:
            await self._async_inner.aclose()
        if self._own_registry is not None:
            await self._own_registry.aclose()

    def close(self) -> None:
        """Close the inner sync transport if made here, and a registry made here."""
        if self._own_inner and self._inner is not None:
            self._inner.close()
        if self._own_registry is not None:
            self._own_registry.close()
