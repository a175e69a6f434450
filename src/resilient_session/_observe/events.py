"""The structured events: one ``http.try`` per try, one ``breaker.transition`` per change and
one ``http.fallback`` per call a fallback answered."""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import structlog

from .hooks import StateChange
from .redact import redact_url

LOGGER_NAME = "resilient_session"

_proxy = structlog.get_logger(LOGGER_NAME)

# The object whose ``is_configured`` ``structlog.is_configured()`` returns (structlog 18.1 on,
# private to it): the events stage reads the attribute on every try, where the function would
# cost a frame. tests/unit/observe/test_events.py fails on the upgrade that moves it.
STRUCTLOG_STATE = structlog._config._CONFIG


class _Resolved(NamedTuple):
    config: dict[str, Any]
    logger: Any
    # What a level fixed by the bound logger's class lets through, decided once.
    info: bool
    warning: bool
    # A check for loggers whose level can change at run time (stdlib logging), made per event.
    is_enabled_for: Callable[[int], bool] | None


_resolved: _Resolved | None = None

# make_filtering_bound_logger hands out one class per level, built once: a logger of one of
# these classes has its level fixed for as long as the configuration holds. The level is read
# from the class (is_enabled_for is structlog 25's; 24 has none).
_FIXED_LEVEL_OF_CLASS = {
    structlog.make_filtering_bound_logger(level): level
    for level in (
        logging.NOTSET,
        logging.DEBUG,
        logging.INFO,
        logging.WARNING,
        logging.ERROR,
        logging.CRITICAL,
    )
}


def logger_for(level: int) -> Any | None:
    """The ``resilient_session`` logger when an event at *level* would go anywhere, else None.

    Nothing is emitted until the application configures structlog: structlog's unconfigured
    default prints every event to stdout, and a library must not fill an application's stdout
    uninvited. The bound logger is resolved once per structlog configuration rather than on
    every event (the lazy proxy rebuilds it on each call), and a level the application filters
    out costs no event fields at all. A level fixed by the logger's class is decided once with
    it; a stdlib logger's level can change at any time, so it is asked on every event.
    """
    global _resolved
    if not structlog.is_configured():
        return None
    config = structlog.get_config()
    resolved = _resolved
    # One comparison in C: the same objects compare equal at once, and a processor list
    # changed in place no longer equals the copy of it kept here.
    if resolved is None or resolved.config != config:
        resolved = _resolved = _resolve(config)
    if not (resolved.info if level <= logging.INFO else resolved.warning):
        return None
    is_enabled_for = resolved.is_enabled_for
    if is_enabled_for is not None and not is_enabled_for(level):
        return None
    return resolved.logger


def _resolve(config: dict[str, Any]) -> _Resolved:
    logger = _proxy.bind()
    fixed_level = _FIXED_LEVEL_OF_CLASS.get(type(logger))
    fixed = fixed_level is not None
    info = fixed_level is None or fixed_level <= logging.INFO
    warning = fixed_level is None or fixed_level <= logging.WARNING
    # structlog documents _logger as the wrapped logger. The stdlib's own isEnabledFor is
    # cached by the stdlib until a level changes, so asking it per event stays cheap.
    wrapped = getattr(logger, "_logger", None)
    is_enabled_for: Callable[[int], bool] | None = None
    if isinstance(wrapped, logging.Logger):
        is_enabled_for = wrapped.isEnabledFor
    elif not fixed:
        is_enabled_for = _level_check(logger)
    # A copy of the processors, of their own type: a tuple stays a tuple and equal.
    kept = {**config, "processors": copy.copy(config["processors"])}
    return _Resolved(kept, logger, info, warning, is_enabled_for)


def _level_check(logger: Any) -> Callable[[int], bool] | None:
    """The bound logger's own level check, when it has one that answers; else None, and every
    event goes to structlog, which logs through such a logger all the same.

    The name is looked up on the class: structlog's generic ``BoundLogger`` forwards any name it
    lacks to the wrapped logger as a log call, so asking the instance would log the level as an
    event, then fail. The check is tried once here: structlog's stdlib ``BoundLogger`` asks the
    wrapped logger, which over a ``PrintLogger`` has no ``isEnabledFor``.
    """
    for name in ("isEnabledFor", "is_enabled_for"):
        if inspect.getattr_static(type(logger), name, None) is None:
            continue
        check: Callable[[int], bool] = getattr(logger, name)
        try:
            check(logging.INFO)
        except AttributeError:
            return None
        return check
    return None


def emit_transition(transition: StateChange) -> None:
    """Log a breaker state change; called after the breaker's lock is released."""
    logger = logger_for(logging.WARNING)
    if logger is not None:
        logger.warning(
            "breaker.transition",
            host=transition.host,
            route=transition.route,
            seq=transition.seq,
            **{"from": transition.from_state.value, "to": transition.to_state.value},
        )


def emit_state_change(event: str, **fields: str | float) -> None:
    """Log ``state.degraded`` or ``state.restored``: the shared state went out of reach, or
    came back. Called from the state backend's own thread, never under a lock."""
    logger = logger_for(logging.WARNING)
    if logger is not None:
        logger.warning(event, **fields)


def emit_fallback(
    *,
    host: str,
    route: str | None,
    reason: str,
    source: str,
    age: int | None,
    url: str,
    redact: frozenset[str],
) -> None:
    """Log ``http.fallback``: a call that failed was answered by a fallback (*source*
    ``stale`` or ``callable``) instead. *url* is redacted here with the names in *redact*, so
    no caller can log it whole; a level filtered out costs no redaction."""
    logger = logger_for(logging.WARNING)
    if logger is not None:
        logger.warning(
            "http.fallback",
            url=redact_url(url, redact),
            host=host,
            route=route,
            reason=reason,
            source=source,
            age=age,
        )
