"""Openings pushed to every worker: the channel, the message, and the thread that listens.

A worker reads the fleet's state at its syncs. An opening is pushed besides: the script that
makes it publishes it (``lua.SYNC``) on a channel under the key prefix, and each session's
listener thread, subscribed to that channel, hands it to its backend, which opens the host's
breaker at once. A try does not wait for that thread to be scheduled: before it goes out, the
caller's thread looks whether the subscribed socket holds unread data, and if so waits (a few
ms at most) for the listener to take it in (``inbox``), so a worker whose listener is still
waiting for a core sends nothing to a host the fleet opened. A push is a head start, never the
only way in: one
missed (the listener reconnecting, Redis gone) is read at the next sync of a host in use, and
each idle host is read once when the listener is subscribed again. The listener logs nothing
and no call waits on it: a Redis that is down or paused costs it a reconnect now and then.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Final, NamedTuple, Protocol

from resilient_session.clock import SYSTEM_CLOCK, Clock

from .inbox import Inbox
from .lua import LAST_GENERATION

THREAD_NAME: Final = "resilient-session-state-push"

# A read blocks this long at most: how soon a listener whose backend was collected ends.
POLL: Final = 1.0
# Silence this long is checked with a PING, and a PING (or the subscription) unanswered this
# long means a connection that is gone without a word (a host that vanished, a paused Redis).
_PING_AFTER: Final = 5.0
_ANSWER_WITHIN: Final = 2.0
# Reconnects back off from the first to the last, doubling; a subscription heard resets it.
_RETRY_FIRST: Final = 0.05
_RETRY_LAST: Final = 1.0
# The listener parses this many messages a second at most, beyond a burst of as many, bar the
# openings it follows: a flood must not have it hold the interpreter the callers need (redis-py
# parses a message in ~60 µs, so a flood at one connection's full rate would take a core).
# The fleet's own openings come far slower; what a flood makes wait behind it is read at the
# next sync, and a backlog past Redis's client-output-buffer-limit costs a reconnect.
_READ_RATE: Final = 1_000.0
_MAX_DIGITS: Final = 16


def channel(prefix: str) -> str:
    """The channel a fleet's openings are published on: under its key prefix, so each fleet
    hears its own."""
    return prefix + "openings"


class Pushed(NamedTuple):
    """One opening as published: the host (as the registry keys it), the fleet's generation
    after the opening, and how long it lasts from then."""

    host: str
    generation: int
    open_for_ms: int


def parse(data: object) -> Pushed | None:
    """An opening as the script publishes it, ``<generation>:<open for ms>:<host>``; None for
    anything else: anyone who may publish on the channel may write to it."""
    if isinstance(data, bytes):
        try:
            data = data.decode()
        except UnicodeDecodeError:
            return None
    if not isinstance(data, str):
        return None
    parts = data.split(":", 2)
    if len(parts) != 3:
        return None
    generation, open_ms, host = parts
    if not (host and _count(generation) and _count(open_ms)):
        return None
    number = int(generation)
    if number > LAST_GENERATION:
        return None
    return Pushed(host, number, int(open_ms))


def _count(text: str) -> bool:
    return 0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()


class Stop(Protocol):
    """When the thread ends (a ``threading.Event``), and how it waits between connections."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Listener(Protocol):
    """What the thread needs of the backend it listens for."""

    def pubsub(self) -> Any:
        """A new redis-py ``PubSub`` of the backend's client, not yet subscribed."""

    def listening(self, live: bool) -> None:
        """The subscription was heard (*live*), or lost: pushes may have been missed."""

    def hear(self, pushed: Pushed) -> bool:
        """An opening pushed; whether a breaker followed it. Never raises."""


def run(
    ref: weakref.ref[Listener],
    stop: Stop,
    name: str,
    clock: Clock = SYSTEM_CLOCK,
    inbox: Inbox | None = None,
) -> None:
    """Listen on channel *name* until *stop* is set or the backend is collected, subscribing
    again, backed off, after every lost connection; *inbox* shows the callers its socket."""
    inbox = inbox if inbox is not None else Inbox()
    retry = _RETRY_FIRST
    while not stop.is_set():
        heard = _connection(ref, stop, name, clock, inbox)
        if heard is None:
            return
        retry = _RETRY_FIRST if heard else min(2 * retry, _RETRY_LAST)
        stop.wait(retry)


def _connection(
    ref: weakref.ref[Listener], stop: Stop, name: str, clock: Clock, inbox: Inbox
) -> bool | None:
    """One connection's life, from subscribing to its loss; whether its subscription was
    heard, or None once the backend is collected."""
    listener = ref()
    if listener is None:
        return None
    subscription = None
    try:
        subscription = _Subscription(listener.pubsub(), clock, inbox)
        # Not held while listening, so a session dropped without close() is still collected.
        del listener
        subscription.listen(ref, stop, name)
    except Exception:  # noqa: BLE001, S110 - a lost connection; the syncs read what it missed
        pass
    finally:
        inbox.watch(None)
        inbox.took()
        if subscription is not None:
            _close(subscription.pubsub)
    listener = ref()
    if listener is None:
        return None
    listener.listening(False)
    return subscription is not None and subscription.heard


class _Subscription:
    """One connection subscribed to the channel, and whether its subscription was heard."""

    def __init__(self, pubsub: Any, clock: Clock, inbox: Inbox) -> None:
        self.pubsub = pubsub
        self.heard = False
        self._clock = clock
        self._inbox = inbox

    def listen(self, ref: weakref.ref[Listener], stop: Stop, name: str) -> None:
        """Subscribe and hand each opening heard to the listener, until *stop*, the listener
        collected, or a silence nothing answers; raises on a failed read."""
        pubsub, clock, inbox = self.pubsub, self._clock, self._inbox
        pubsub.subscribe(name)
        pinged = False
        heard_at = clock.monotonic()
        pace = _Pace(clock)
        while not stop.is_set():
            pace.wait(stop)
            # Its socket as of now: redis-py may have connected again inside the last read.
            inbox.watch(pubsub)
            message = pubsub.get_message(timeout=POLL)
            listener = ref()
            if listener is None:
                return
            now = clock.monotonic()
            if message is None:
                del listener
                inbox.took()
                if not self.heard or pinged:
                    if now - heard_at >= _ANSWER_WITHIN:
                        return
                elif now - heard_at >= _PING_AFTER:
                    pubsub.ping()
                    pinged, heard_at = True, now
                continue
            heard_at, pinged = now, False
            kind = message.get("type")
            followed = False
            if kind == "message":
                pushed = parse(message.get("data"))
                if pushed is not None:
                    followed = listener.hear(pushed)
            elif kind == "subscribe" and not self.heard:
                self.heard = True
                listener.listening(True)
            del listener
            inbox.took(followed)
            if not followed:
                pace.spend()


class _Pace:
    """The listener's reads, at most ``_READ_RATE`` a second beyond a burst of as many."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._tokens = _READ_RATE
        self._at = clock.monotonic()

    def spend(self) -> None:
        """A message was read that was no opening followed."""
        self._tokens -= 1.0

    def wait(self, stop: Stop) -> None:
        """Before a read: wait until one is due, or *stop*."""
        now = self._clock.monotonic()
        tokens = min(_READ_RATE, self._tokens + (now - self._at) * _READ_RATE)
        if tokens < 1.0:
            stop.wait((1.0 - tokens) / _READ_RATE)
            later = self._clock.monotonic()
            # At least the one waited for: rounding must not ask for another wait of nothing.
            tokens = max(1.0, min(_READ_RATE, tokens + (later - now) * _READ_RATE))
            now = later
        self._tokens, self._at = tokens, now


def _close(pubsub: Any) -> None:
    if pubsub is not None:
        # Its connection is gone either way.
        with contextlib.suppress(Exception):
            pubsub.close()
