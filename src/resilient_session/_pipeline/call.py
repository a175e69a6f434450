"""The start of a call: the values its tries share, and the replay rules that say whether a
retry may send the request again (whatever the wire it goes out on)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from resilient_session._state.try_table import TryTable, table_for
from resilient_session.config.per_call import Overrides, current_overrides, effective_policy
from resilient_session.config.policy import HostPolicy
from resilient_session.deadline import current_scope

from .attempt import Call

if TYPE_CHECKING:
    from resilient_session._state.registry import HostRegistry, HostState

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
    wire: Wire[Any, Any],
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
    recent = registry.recent
    # The host of the call before, found by its origin and the path's slash: no frame.
    # hot path: recent-host
    state = recent[1] if recent is not None and url.startswith(recent[0]) else registry.for_url(url)
    # Read once a call: a contextvar's get, and on a call without settings of its own nothing
    # more (the per-call view is looked up only under them).
    overrides = current_overrides()
    if overrides is None:
        policy = state.policy
        table = state.table
        default_timeout = state.default_timeout
    else:
        policy, table, default_timeout = call_view(state, overrides)
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
        timeout = default_timeout
    method = request.method or "GET"
    # Prepared requests carry their method in capitals already.
    # hot path: method-capitals
    idempotent = method in IDEMPOTENT_METHODS
    if not idempotent:
        method = method.upper()
        idempotent = method in IDEMPOTENT_METHODS or IDEMPOTENCY_HEADER in request.headers
    # hot path: field-by-field
    call = _new_object(Call)
    call.request = request
    call.url = url
    call.method = method
    call.state = state
    call.policy = policy
    call.table = table
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


def call_view(
    state: HostState, overrides: Overrides
) -> tuple[HostPolicy, TryTable, tuple[float, float]]:
    """What a call to *state*'s host runs on under *overrides*: the policy with them over the
    host's, its table of statuses and its default timeout; worked out once for each pair.

    Raises:
        ConfigError: the settings break a rule between two keys of the host's policy.
    """
    base = state.policy
    key = (id(base), overrides)
    known = _VIEWS.get(key)
    if known is not None and known[0] is base:
        return known[1]
    policy = effective_policy(base, overrides)
    table = state.table if policy.retry == base.retry else table_for(policy.retry)
    view = (policy, table, (policy.timeout.connect, policy.timeout.read))
    if len(_VIEWS) >= _VIEWS_KEPT:
        _VIEWS.clear()
    # The entry holds the host's policy, so its id cannot be reused while the entry is kept.
    _VIEWS[key] = (base, view)
    return view


# A program that builds its settings anew for each call repeats a handful of them.
_VIEWS_KEPT = 1024
_VIEWS: dict[
    tuple[int, Overrides],
    tuple[HostPolicy, tuple[HostPolicy, TryTable, tuple[float, float]]],
] = {}


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
