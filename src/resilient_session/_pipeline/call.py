"""The start of a call: the values its tries share, and the replay rules that say whether a
retry may send the request again (whatever the wire it goes out on)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from resilient_session.deadline import current_scope

from .attempt import Call

if TYPE_CHECKING:
    from resilient_session._state.registry import HostRegistry

    from .wire import Wire

# RFC 9110 §9.2.2; POST and PATCH become safe to replay only with an Idempotency-Key.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
IDEMPOTENCY_HEADER = "Idempotency-Key"

_REPLAYABLE_BODIES = (str, bytes, bytearray, memoryview)

_new_object = object.__new__

# What ``start_call``'s *body* is when not given: the request's own ``body``.
_ON_REQUEST: Any = object()


def start_call(
    request: Any,
    registry: HostRegistry,
    wire: Wire,
    stream: bool = False,
    timeout: Any = None,
    verify: bool | str = True,
    cert: Any = None,
    proxies: Mapping[str, str] | None = None,
    *,
    url: str | None = None,
    body: Any = _ON_REQUEST,
) -> Call:
    """The values one ``send`` keeps across its tries: host state, the registry's runtime,
    the *wire* the tries go out on, deadline, replay safety.

    *request* is the wire's: its ``method`` and ``headers`` (any mapping; the wire's decides
    how a header name is matched) are read, and its ``url`` and ``body`` unless given: *url*
    as text, and *body* as the bytes (or the stream) it sends, for a request that holds them
    elsewhere (httpx's: a ``URL`` object, and a ``stream``).
    """
    runtime = registry.runtime
    now = runtime.clock.monotonic()
    if url is None:
        url = request.url or ""
    state = registry.for_url(url)
    policy = state.policy
    scope = current_scope()
    default = policy.deadline.default
    if scope is None:
        deadline_at = None if default is None else now + default
    else:
        deadline_at = scope.at
        if scope.use_default:
            span = scope.span
            # Within a call's span the default runs from the call's start, not this hop's.
            if span is not None:
                default_at = span.default_ends(default)
            else:
                default_at = None if default is None else now + default
            if default_at is not None and (deadline_at is None or default_at < deadline_at):
                deadline_at = default_at
    if timeout is None:
        # The one deliberate difference from requests: a try never waits forever.
        timeout = state.default_timeout
    method = request.method or "GET"
    # Prepared requests carry their method in capitals already: ~700 instructions.
    idempotent = method in IDEMPOTENT_METHODS
    if not idempotent:
        method = method.upper()
        idempotent = method in IDEMPOTENT_METHODS or IDEMPOTENCY_HEADER in request.headers
    # Made field by field, without a constructor's frame: this runs once per call.
    call = _new_object(Call)
    call.request = request
    call.url = url
    call.method = method
    call.state = state
    call.runtime = runtime
    call.wire = wire
    call.stream = stream
    call.timeout = timeout
    call.verify = verify
    call.cert = cert
    call.proxies = proxies
    call.deadline_at = deadline_at
    call.started_at = now
    call.idempotent = idempotent
    if body is _ON_REQUEST:
        body = request.body
    call.replayable = body is None or isinstance(body, _REPLAYABLE_BODIES) or _rereadable(body)
    return call


def _rereadable(body: object) -> bool:
    """True for a bytes-like body (``array.array``, a NumPy array) that sends the same bytes
    each time; a file-like one (``mmap`` included) is read from where it stands, once."""
    if hasattr(body, "read"):
        return False
    try:
        memoryview(body)  # type: ignore[arg-type]  # probing for the buffer protocol
    except TypeError:
        return False
    return True
