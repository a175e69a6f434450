"""Openings pushed to every worker: the channel, the message, and the thread that listens.

A worker reads the fleet's state at its syncs. An opening is pushed besides: the script that
makes it publishes it (``lua.SYNC``) on a channel under the key prefix, and each session's
listener thread, subscribed to that channel, hands it to its backend, which opens the host's
breaker at once. A try does not wait for that thread to be scheduled: before it goes out, the
caller's thread looks whether the subscribed socket holds unread data, and if so waits (a few
ms at most) for the listener to take it in (``Inbox``), so a worker whose listener is still
waiting for a core sends nothing to a host the fleet opened. A push is a head start, never the
only way in: one
missed (the listener reconnecting, Redis gone) is read at the next sync of a host in use, and
each idle host is read once when the listener is subscribed again. The listener logs nothing
and no call waits on it: a Redis that is down or paused costs it a reconnect now and then.
"""

from __future__ import annotations

import contextlib
import select
import threading
import weakref
from typing import Any, Final, NamedTuple, Protocol

from resilient_session.clock import SYSTEM_CLOCK, Clock

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
# A try waits this long at most for the listener to take in what its socket holds; a listener
# that takes longer is not waited for again until it takes something in.
_HEED_WITHIN: Final = 0.05
# The socket cannot tell what it holds until the listener parses it: junk, or an opening of a
# host this process does not hold, holds the tries as long as an opening would. Such holds are
# paid from a credit of this share of the time (at most _HEED_WITHIN saved up), so a flood on
# the channel costs the callers this share of their time at most. A hold that ends in an
# opening followed here costs nothing: the tries held would have been refused.
_HOLD_SHARE: Final = 0.02
# The listener parses this many messages a second at most, beyond a burst of as many, bar the
# openings it follows: a flood must not have it hold the interpreter the callers need (redis-py
# parses a message in ~60 µs, so a flood at one connection's full rate would take a core).
# The fleet's own openings come far slower; what a flood makes wait behind it is read at the
# next sync, and a backlog past Redis's client-output-buffer-limit costs a reconnect.
_READ_RATE: Final = 1_000.0
# The socket is looked at once in this long at most, by whichever try comes first: a system
# call costs a canned call ~25 µs on a VM (more than its own ~1.5 µs: the caches it leaves
# cold), and this bounds it at one per 2 ms. A worker sending tries further apart than this,
# as a worker on a host that went down does, looks before each of them.
_LOOK_EVERY: Final = 0.002
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


class Inbox:
    """The listener's socket as a caller's thread sees it: whether it holds data not yet read,
    and a wait for the listener to take it in. One per backend, across its connections.

    What lies on the socket unread may be an opening, or anything else anyone published (nor
    does the look see what redis-py has read from it already): nothing tells until the
    listener parses it. So a try held there goes on as soon as the listener has followed an
    opening, emptied the socket, or parsed two messages (the first may be one it was reading
    before the look). Holds that end in no opening followed are paid from a credit of
    ``_HOLD_SHARE`` of the time; while it is spent the socket is not looked at.
    """

    def __init__(self) -> None:
        self._listener = 0
        self._next_look = 0.0
        self.reset()

    def watch(self, pubsub: Any) -> None:
        """On the listener's thread: look at *pubsub*'s socket from now on (None: at none)."""
        fd = -1
        if pubsub is not None:
            # redis-py keeps the socket private; without one the callers never wait.
            sock = getattr(getattr(pubsub, "connection", None), "_sock", None)
            with contextlib.suppress(Exception):
                fd = int(sock.fileno()) if sock is not None else -1
        self._listener = threading.get_ident()
        self._fd = fd

    def took(self, followed: bool = False) -> None:
        """On the listener's thread: a read is over, and what it read handed over; *followed*:
        it was an opening a breaker here followed."""
        # Counted unlocked (this thread alone writes them), and the lock taken only while a
        # try is held: under a flood this runs for every message, and a caller held, its wait
        # over, must not queue for the lock behind each of them. The count before the flag: a
        # hold that finds the count unchanged may mark the listener stalled, and this clears it.
        self._reads += 1
        if followed:
            self._followed += 1
        self._stalled = False
        if self._holding:
            with self._taken:
                self._taken.notify_all()

    def reset(self) -> None:
        """At the start, and in a forked child: the parent's socket and thread are not this
        process's."""
        self._fd = -1
        self._taken = threading.Condition(threading.Lock())
        self._stalled = False
        self._looking = False
        self._unread_seen = False
        # The listener's reads over, and the openings among them a breaker followed.
        self._reads: int = 0
        self._followed: int = 0
        # Tries held now; counted under the lock, before each looks at the counts above.
        self._holding: int = 0
        self._credit: float = _HEED_WITHIN
        self._credited_at: float = _monotonic()

    def heed(self) -> None:
        """Before a try: when the socket holds unread data (an opening, most likely), wait until
        the listener has taken it in. Looks at most once every ``_LOOK_EVERY``."""
        fd = self._fd
        if fd < 0 or self._stalled:
            return
        if not self._unread_seen:
            now = _monotonic()
            # Unlocked: two threads looking at once cost a second look, never a missed one. A
            # look under way (the poll lets other threads run) is no reason to skip one.
            if now < self._next_look and not self._looking:
                return
            self._next_look = now + _LOOK_EVERY
            self._looking = True
            unread = _unread(fd)
            if unread:
                # Every other thread's try waits with this one, looked or not. Set before the
                # look is over, so a thread that skips a look sees one or the other.
                self._unread_seen = True
            self._looking = False
            if not unread:
                return
        if threading.get_ident() == self._listener:
            # A hook the listener runs makes a call: it is taking the data in already.
            return
        with self._taken:
            self._hold(fd)
            self._unread_seen = False

    def _hold(self, fd: int) -> None:
        """Under the lock: wait for the listener, as long as the credit allows, and pay for the
        wait unless it ended in an opening followed."""
        began = _monotonic()
        credit = min(_HEED_WITHIN, self._credit + (began - self._credited_at) * _HOLD_SHARE)
        self._credit, self._credited_at = credit, began
        if credit <= 0.0:
            return
        self._holding += 1
        reads, followed = self._reads, self._followed
        try:
            taken_in = self._taken.wait_for(
                lambda: (
                    self._followed != followed
                    or self._reads - reads >= 2
                    or self._fd != fd
                    or not _unread(fd)
                ),
                credit,
            )
        finally:
            self._holding -= 1
        if self._followed == followed:
            # Concurrent holds are each paid: a flood costs the credit faster, never longer.
            ended = _monotonic()
            self._credit -= ended - began
            if self._credit < 0.0:
                # Nor is the socket looked at until the credit is back: under a flood a look
                # hands the interpreter to the listener, and the caller waits to get it back.
                self._next_look = ended - self._credit / _HOLD_SHARE
        if not taken_in and self._reads == reads:
            # The listener read nothing meanwhile: not waited for again until it does.
            self._stalled = True


_monotonic = SYSTEM_CLOCK.monotonic


if hasattr(select, "poll"):

    def _unread(fd: int) -> bool:
        # poll(), not select(): select() takes no descriptor numbered FD_SETSIZE (1,024) or
        # more, and a process that holds many sockets gives the listener's such a number.
        poller = select.poll()
        try:
            poller.register(fd, select.POLLIN)
            ready = poller.poll(0)
        except (OSError, ValueError):
            return False
        # POLLNVAL: closed between the look and the poll, nothing left to wait for. A hangup
        # or an error is for the listener to take in, as data is.
        return bool(ready) and not ready[0][1] & select.POLLNVAL

else:  # pragma: no cover - Windows, whose select() takes sockets by handle, at any value

    def _unread(fd: int) -> bool:
        try:
            readable, _, _ = select.select((fd,), (), (), 0)
        except (OSError, ValueError):
            return False
        return bool(readable)


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
