"""Configuration: ``Config`` and ``load`` (YAML, a dict or a path), the policy models, the
JSON schema; reading files and validating them live beside it."""

from __future__ import annotations

from .document import ConfigDocument, schema
from .model import ENV_VAR, Config, load
from .policy import (
    BreakerPolicy,
    BudgetPolicy,
    DeadlinePolicy,
    EventsPolicy,
    FallbackPolicy,
    HedgingPolicy,
    HostPolicy,
    InboundPolicy,
    LimitPolicy,
    RegistryPolicy,
    RetryPolicy,
    StalePolicy,
    StatePolicy,
    ThrottlePolicy,
    TimeoutPolicy,
)

__all__ = [
    "ENV_VAR",
    "BreakerPolicy",
    "BudgetPolicy",
    "Config",
    "ConfigDocument",
    "DeadlinePolicy",
    "EventsPolicy",
    "FallbackPolicy",
    "HedgingPolicy",
    "HostPolicy",
    "InboundPolicy",
    "LimitPolicy",
    "RegistryPolicy",
    "RetryPolicy",
    "StalePolicy",
    "StatePolicy",
    "ThrottlePolicy",
    "TimeoutPolicy",
    "load",
    "schema",
]
