"""The watchdog: one thread that shuts a try's socket down when the call's deadline passes.

A per-read socket timeout restarts with every byte, so an upstream that trickles its status
line, headers or TLS handshake one byte at a time never trips it. The watchdog bounds the
whole try instead: the deadline stage opens a :class:`Watch` for each try of a call that has
a deadline, the try's connection arms it with a socket, and if the watch is still armed when
its instant passes, the watchdog calls ``shutdown(SHUT_RDWR)`` on that socket, which wakes a
blocked ``recv`` or ``send`` at once.

Arming and disarming take no lock: the armed watches are the keys of one dict, and whoever
pops a watch from it owns its ending, the try (disarmed) or the thread (fired); a dict's
``pop`` is atomic. The thread sleeps until the earliest armed instant and is woken only when
a new watch falls due before that, so the lock is for the thread and the rare paths: waking
it, a disarm that meets a firing, and a new connection's socket.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
import threading
from collections.abc import Callable
from typing import Final

from resilient_session.clock import SYSTEM_CLOCK, Clock

from .arrival import hedge_wait

# A watch's life: IDLE until a connection arms it, then DISARMED by its try or FIRING and
# FIRED by the watchdog; DISARMED and FIRED are final. Ordered so that one comparison,
# ``state <= DISARMED``, says "ended, or never armed, and not fired".
# hot path: watch-order
IDLE: Final = 0
DISARMED: Final = 1
ARMED: Final = 2
FIRING: Final = 3
FIRED: Final = 4

_INF: Final = float("inf")
# Condition.wait raises OverflowError past this (about 49 days on Windows); a deadline that far
# off is simply looked at again after it.
_LONGEST_WAIT: Final = threading.TIMEOUT_MAX

_real_monotonic = SYSTEM_CLOCK.monotonic


class Watch:
    """One try's bound: the instant it ends, *seconds* from *now*, and the socket to shut down.

    The instant is on real time by default, whatever clock the stages run on: the watchdog
    thread sleeps on real time. *body* says whether the watch lasts until the response's body
    has been read (the try reads it), or ends with its headers (the caller streams it).
    """

    __slots__ = ("body", "sock", "state", "until")

    def __init__(
        self, seconds: float, now: Callable[[], float] = _real_monotonic, body: bool = True
    ) -> None:
        self.until = now() + seconds
        self.state = IDLE
        self.sock: socket.socket | None = None
        self.body = body


class Watchdog:
    """Fires watches whose instant has passed; one lazily started daemon thread serves all.

    Args:
        clock: the time the instants are on.
        autostart: start the thread on the first arm; tests drive :meth:`fire_due` instead.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK, *, autostart: bool = True) -> None:
        self._clock = clock
        self._autostart = autostart
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the thread waits here for an earlier watch
        self._settled = threading.Condition(self._lock)  # a disarm waits here for a firing
        self._live: dict[Watch, float] = {}  # armed watches and their instants
        # The instant the thread sleeps until; +inf while it is awake or not started, so that
        # every arm then takes the slow path, which wakes or starts it.
        self._wake_at = _INF
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        """Armed watches."""
        return len(self._live)

    def arm(self, watch: Watch, sock: socket.socket | None) -> None:
        """Put *watch* under the watchdog; *sock* may come later, through :meth:`attach`."""
        watch.sock = sock
        watch.state = ARMED  # before it is live: the thread's FIRING must come after
        until = self._live[watch] = watch.until
        # Read after the watch is live: a thread that went to sleep before this read sleeps
        # until the instant read here, and one that is awake will see the watch.
        if until < self._wake_at:
            self._wake_early()

    def _wake_early(self) -> None:
        with self._lock:
            if self._thread is None and self._autostart:
                self._thread = threading.Thread(
                    target=self._run, name="resilient-session-watchdog", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def attach(self, watch: Watch, sock: socket.socket) -> bool:
        """Give an armed *watch* its socket; False when it has fired already."""
        with self._lock:  # the thread marks a watch FIRING under it, then reads its socket
            if watch.state != ARMED:
                return False
            watch.sock = sock
            return True

    def disarm(self, watch: Watch) -> bool:
        """End *watch*; True when the watchdog fired it (its socket is shut down by return).

        Waits for a firing in progress, so the socket is never shut down after this returns:
        the caller may then close it or hand its connection back to the pool.
        """
        if self._live.pop(watch, None) is not None:  # taken from the thread: it never fires
            watch.state = DISARMED  # the watchdog keeps no reference to it, nor to its socket
            return False
        if watch.state <= DISARMED:  # never armed, or ended already
            return False
        with self._lock:
            if watch.state == ARMED:  # armed in a parent process, before a fork
                watch.state = DISARMED
                return False
            while watch.state != FIRED:
                self._settled.wait()
            return True

    def cut(self, watch: Watch) -> None:
        """Fire *watch* now, from any thread: at once if it is armed, else as soon as its
        connection arms it (a hedged call ending the tries that lost its race).

        An armed watch is fired on the calling thread, by the same steps as the watchdog's
        (taken from the armed ones and marked firing under the lock, so a racing disarm waits
        for the shutdown): the watchdog thread is one of many wanting the interpreter on a
        busy process, and a cut left to it waited there hundreds of milliseconds while the
        caller's thread sat on the try that lost. A watch not armed yet gets an instant in the
        past, which its arm stores, waking the thread. A watch that has ended is left alone.
        """
        watch.until = -_INF
        with self._lock:
            if self._live.pop(watch, None) is None:
                return
            watch.state = FIRING
        if watch.sock is not None:
            with contextlib.suppress(OSError):  # closed or never connected: nothing to wake
                watch.sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            watch.state = FIRED
            self._settled.notify_all()

    def fire_due(self) -> int:
        """Shut down the socket of every armed watch whose instant has passed; how many."""
        due: list[Watch] = []
        with self._lock:
            now = self._clock.monotonic()
            live = self._live
            for watch in live.copy():
                # The watch's own instant, which cut() may have moved since it was armed. The
                # pop decides a race with the watch's disarm: one of the two gets it.
                if watch.until <= now and live.pop(watch, None) is not None:
                    watch.state = FIRING
                    due.append(watch)
        if not due:
            return 0
        # Outside the lock: shutting a socket down is a system call.
        for watch in due:
            if watch.sock is not None:
                with contextlib.suppress(OSError):  # closed or never connected: nothing to wake
                    watch.sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            for watch in due:
                watch.state = FIRED
            self._settled.notify_all()
        return len(due)

    def _run(self) -> None:
        lock = self._lock
        while True:
            self.fire_due()
            with lock:
                # Every arm since the last look took the slow path (the instant was +inf), and
                # waits on the lock to notify: none is lost between this look and the wait.
                earliest = min((watch.until for watch in self._live.copy()), default=_INF)
                now = self._clock.monotonic()
                if earliest > now:
                    self._wake_at = earliest
                    wait = None if earliest == _INF else min(earliest - now, _LONGEST_WAIT)
                    self._wake.wait(wait)
                    self._wake_at = _INF


WATCHDOG: Final = Watchdog()

# The watch of the try running in this context, set by a TryWatch around each try of a call
# with a deadline (the deadline stage's bound) and by a RaceWatch around each try of a hedged
# call (the race's); connections arm it. Other calls without a deadline never set it.
WATCHED: Final[contextvars.ContextVar[Watch | None]] = contextvars.ContextVar(
    "resilient_session_watch", default=None
)


class TryWatch(Watch):
    """The watch over one try, and the bound the try runs in: the context's watch inside the
    ``with`` around the try, which connections arm, and settled on the way out (``fired``)."""

    __slots__ = ("_token", "fired")

    fired: bool  # set on the way out: the watchdog cut the try short

    def __enter__(self) -> TryWatch:
        self._token = WATCHED.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        WATCHED.reset(self._token)
        # The settle rule, the one place it is written: a watch its connection disarmed, as
        # every healthy try's is, costs one comparison.
        self.fired = self.state > DISARMED and WATCHDOG.disarm(self)


class RaceWatch(TryWatch):
    """A hedged call's try's watch, which another thread may cut (:meth:`cut`), set in place
    of the try's own (*outer*, the deadline stage's, never armed itself) around one try: it
    ends at *outer*'s instant and, like it, with the body or the headers; without *outer* (a
    call with no deadline), only a cut fires it."""

    __slots__ = ("outer",)

    def __init__(self, outer: Watch | None) -> None:
        # Watch's fields set here, without its clock read: no instant but *outer*'s, if any.
        if outer is None:
            self.until, self.body = _INF, True
        else:
            self.until, self.body = outer.until, outer.body
        self.state = IDLE
        self.sock = None
        self.outer = outer

    def cut(self) -> None:
        """End the try now, from any thread (``Watchdog.cut``)."""
        WATCHDOG.cut(self)

    def pass_on(self) -> None:
        """Settle *outer* as fired when this watch fired: it fired at *outer*'s own instant (a
        winner is never cut), so whoever opened *outer* sees a try the deadline cut, as if
        *outer* had been armed itself."""
        if self.fired and self.outer is not None:
            self.outer.state = FIRED

    def hedge_wait(self, delay: float) -> float:
        """Seconds a hedge of this try should still wait, *delay* having passed on the
        caller's clock, as the kernel saw its socket (``arrival.hedge_wait``)."""
        return hedge_wait(self.sock, delay)


if hasattr(os, "register_at_fork"):
    # A child has no watchdog thread and a lock that may have been held at the fork.
    os.register_at_fork(after_in_child=WATCHDOG._reset)
