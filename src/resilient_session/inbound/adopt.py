"""What an inbound request puts in force while it is served: the caller's deadline, less a
margin, and its retry intent."""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import NamedTuple

from resilient_session._hops import parse_attempt, parse_timeout_ms, single
from resilient_session._pipeline import intent
from resilient_session.clock import Clock
from resilient_session.config import Config
from resilient_session.deadline import DeadlineScope, current_scope
from resilient_session.deadline import enter as enter_scope
from resilient_session.deadline import leave as leave_scope

from .peers import TrustedNetworks


class Adopted(NamedTuple):
    """The scope and intent one inbound request runs under."""

    scope: DeadlineScope | None
    single_try: bool

    def enter(self) -> Tokens:
        """Put both in force; returns what ``leave`` needs to undo them."""
        scope_token = enter_scope(self.scope) if self.scope is not None else None
        intent_token = intent.enter(True) if self.single_try else None
        return Tokens(scope_token, intent_token)

    @staticmethod
    def release(tokens: Tokens) -> None:
        """Put back what was in force before ``enter``, once the caller has its answer: work
        done after it (background tasks, close hooks) is not the caller's, which will neither
        wait for it nor retry it. ``leave`` still undoes ``enter`` afterwards."""
        single_try = tokens.intent
        if single_try is not None:
            was = single_try.old_value
            single_try.var.set(False if was is contextvars.Token.MISSING else was)
        scope = tokens.scope
        if scope is not None:
            before = scope.old_value
            scope.var.set(None if before is contextvars.Token.MISSING else before)

    @staticmethod
    def leave(tokens: Tokens) -> None:
        """Undo ``enter``, in the same context."""
        if tokens.intent is not None:
            intent.leave(tokens.intent)
        if tokens.scope is not None:
            leave_scope(tokens.scope)


class Tokens(NamedTuple):
    """What undoes an ``Adopted.enter``."""

    scope: contextvars.Token[DeadlineScope | None] | None
    intent: contextvars.Token[bool] | None


class Adopter:
    """Reads the two headers of an inbound request under the ``inbound:`` config."""

    def __init__(self, config: Config, clock: Clock) -> None:
        policy = config.inbound
        headers = config.defaults.deadline
        self._clock = clock
        self._margin = policy.margin_ms / 1000.0
        self._max_ms = policy.max_ms
        # The names the fleet's outgoing calls send; a name set to null is not read either.
        self.timeout_header = headers.header if policy.adopt_deadline else None
        self.attempt_header = (
            headers.attempt_header if policy.single_try_when_caller_retries else None
        )
        # None trusts every caller; the middlewares then never look up the peer at all.
        networks = policy.trusted_networks
        self.trusted = None if networks is None else TrustedNetworks(networks)

    def adopt(
        self, timeouts: Sequence[str], attempts: Sequence[str], peer: object = None
    ) -> Adopted | None:
        """What to put in force for a request with these header values (each header's values
        as received) from *peer* (its address, when ``trusted`` is set); None when there is
        nothing to adopt, or it came from a peer outside the trusted networks."""
        scope = None
        if self.timeout_header is not None:
            milliseconds = parse_timeout_ms(single(timeouts), self._max_ms)
            if milliseconds is not None:
                scope = self._scope(milliseconds)
        single_try = False
        if self.attempt_header is not None:
            attempt = parse_attempt(single(attempts))
            single_try = attempt is not None and attempt.caller_retries
        if scope is None and not single_try:
            return None
        # Checked only for a request that asks for something: most carry neither header.
        trusted = self.trusted
        if trusted is not None and peer not in trusted:
            return None
        return Adopted(scope, single_try)

    def _scope(self, milliseconds: int) -> DeadlineScope:
        # A margin that eats the whole timeout leaves a spent deadline: the caller has given up
        # by the time an answer could reach it, so outgoing calls fail fast.
        at = self._clock.monotonic() + max(0.0, milliseconds / 1000.0 - self._margin)
        outer = current_scope()
        if outer is None:
            return DeadlineScope(at)
        # Only ever shorter than a deadline already in force, and the configured default
        # deadline still applies beneath, as under a ``with deadline()`` block.
        if outer.at is not None and outer.at < at:
            at = outer.at
        return DeadlineScope(at, use_default=outer.use_default)
