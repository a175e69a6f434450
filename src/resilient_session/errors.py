"""The three exceptions resilient_session adds, each a subclass of what it refines."""

from __future__ import annotations

import requests


class DeadlineExceeded(requests.exceptions.Timeout):
    """The call's deadline ran out with no response at hand.

    A subclass of ``requests.Timeout``, so ``except requests.Timeout`` still catches it.
    """


class CircuitOpenError(requests.exceptions.ConnectionError):
    """The host's circuit breaker refused the call before it touched the network.

    A subclass of ``requests.ConnectionError``: to the caller an open breaker looks like an
    unreachable host, which is what it stands for.
    """


class ConfigError(requests.exceptions.RequestException, ValueError):
    """The configuration is invalid; the message names the dotted key path and the bad value."""
