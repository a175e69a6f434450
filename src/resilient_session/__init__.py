"""resilient_session: a drop-in requests.Session that retries safely and bounds time."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from ._observe.hooks import (
    BackendChange,
    BackendHook,
    SendHook,
    StateChange,
    StateHook,
    TryHook,
    TryRecord,
    TrySending,
)
from ._observe.otel import OpenTelemetryHook
from ._observe.otel_requests import redacting_request_hook
from ._observe.redact import redact_text, redact_url
from ._observe.render import json_processors, log_json_lines
from ._pipeline.attempt import Reason, Verdict
from ._state.breaker import BreakerState
from ._state.fallback import FailedCall, FallbackInfo, FallbackSource, fallback_of
from ._state.registry import HostHealth, HostRegistry
from .adapter import ResilientAdapter
from .clock import SYSTEM_CLOCK, Clock, SystemClock
from .config import Config, load
from .config.per_call import settings
from .deadline import deadline, remaining
from .errors import (
    CircuitOpenError,
    ConcurrencyLimitError,
    ConfigError,
    DeadlineExceeded,
    HedgeCancelled,
    ResponseTooLarge,
    ThrottledError,
)
from .session import UNSET, ResilientSession

if TYPE_CHECKING:
    from ._api import delete, get, head, options, patch, post, put, request

try:
    __version__ = version("resilient-session")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "SYSTEM_CLOCK",
    "UNSET",
    "BackendChange",
    "BackendHook",
    "BreakerState",
    "CircuitOpenError",
    "Clock",
    "ConcurrencyLimitError",
    "Config",
    "ConfigError",
    "DeadlineExceeded",
    "FailedCall",
    "FallbackInfo",
    "FallbackSource",
    "HedgeCancelled",
    "HostHealth",
    "HostRegistry",
    "OpenTelemetryHook",
    "Reason",
    "ResilientAdapter",
    "ResilientSession",
    "ResponseTooLarge",
    "SendHook",
    "StateChange",
    "StateHook",
    "SystemClock",
    "ThrottledError",
    "TryHook",
    "TryRecord",
    "TrySending",
    "Verdict",
    "__version__",
    "deadline",
    "delete",
    "fallback_of",
    "get",
    "head",
    "json_processors",
    "load",
    "log_json_lines",
    "options",
    "patch",
    "post",
    "put",
    "redact_text",
    "redact_url",
    "redacting_request_hook",
    "remaining",
    "request",
    "settings",
]

_MODULE_VERBS = frozenset({"delete", "get", "head", "options", "patch", "post", "put", "request"})


def __getattr__(name: str) -> Any:
    # The module verbs (resilient_session.get and the rest) are imported on first use, as the
    # redis backend is when selected: a program that never calls them builds nothing for them.
    if name in _MODULE_VERBS:
        from . import _api

        verbs = {verb: getattr(_api, verb) for verb in _MODULE_VERBS}
        globals().update(verbs)
        return verbs[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
