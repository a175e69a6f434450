"""The watchdog: one thread that shuts a try's socket down when the call's deadline passes.

A per-read socket timeout restarts with every byte, so an upstream that trickles its status
line, headers or TLS handshake one byte at a time never trips it. The watchdog bounds the
whole try instead: the deadline stage opens a :class:`Watch` for each try of a call that has
a deadline, the try's connection arms it with a socket, and if the watch is still armed when
its instant passes, the watchdog calls ``shutdown(SHUT_RDWR)`` on that socket, which wakes a
blocked ``recv`` or ``send`` at once.

Arming and disarming cost one uncontended lock and a heap push; a disarmed watch stays in the
heap until it reaches the front (lazy cancellation), and the thread sleeps until the earliest
instant and is woken only when a new watch falls due before that.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import os
import socket
import threading
from collections.abc import Callable
from typing import Final

from .clock import SYSTEM_CLOCK, Clock

# A watch's life: IDLE until a connection arms it, then DISARMED by its try or FIRING and
# FIRED by the watchdog; DISARMED and FIRED are final. Ordered so that one comparison,
# ``state <= DISARMED``, says "ended, or never armed, and not fired" on the hot path.
IDLE: Final = 0
DISARMED: Final = 1
ARMED: Final = 2
FIRING: Final = 3
FIRED: Final = 4

# Rebuild the heap once this many disarmed watches wait in it, and they are most of it.
_COMPACT_AT: Final = 256

_INF: Final = float("inf")

_real_monotonic = SYSTEM_CLOCK.monotonic


class Watch:
    """One try's bound: the instant it ends, *seconds* from *now*, and the socket to shut down.

    The instant is on real time by default, whatever clock the stages run on: the watchdog
    thread sleeps on real time.
    """

    __slots__ = ("sock", "state", "until")

    def __init__(self, seconds: float, now: Callable[[], float] = _real_monotonic) -> None:
        self.until = now() + seconds
        self.state = IDLE
        self.sock: socket.socket | None = None


_Entry = tuple[float, int, Watch]


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
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._cancelled = 0  # disarmed watches still in the heap
        self._wake_at = -_INF  # the instant the thread sleeps until; -inf while it is awake
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        """Watches in the heap, disarmed ones not yet dropped included."""
        return len(self._heap)

    def arm(self, watch: Watch, sock: socket.socket | None) -> None:
        """Put *watch* under the watchdog; *sock* may come later, through :meth:`attach`."""
        with self._lock:
            watch.sock = sock
            watch.state = ARMED
            heapq.heappush(self._heap, (watch.until, next(self._seq), watch))
            if watch.until < self._wake_at:
                self._wake.notify()
            thread = None
            if self._thread is None and self._autostart:
                thread = self._thread = threading.Thread(
                    target=self._run, name="resilient-session-watchdog", daemon=True
                )
        if thread is not None:
            thread.start()

    def attach(self, watch: Watch, sock: socket.socket) -> bool:
        """Give an armed *watch* its socket; False when it has fired already."""
        with self._lock:
            if watch.state != ARMED:
                return False
            watch.sock = sock
            return True

    def disarm(self, watch: Watch) -> bool:
        """End *watch*; True when the watchdog fired it (its socket is shut down by return).

        Waits for a firing in progress, so the socket is never shut down after this returns:
        the caller may then close it or hand its connection back to the pool.
        """
        if watch.state <= DISARMED:  # final, or only ever changed by this thread
            return False
        with self._lock:
            if watch.state == ARMED:
                watch.state = DISARMED
                watch.sock = None  # the connection may close it now; the heap need not keep it
                heap = self._heap
                if heap[0][2] is watch:  # the usual case, calls ending in the order they began
                    heapq.heappop(heap)
                    if heap and heap[0][2].state != ARMED:
                        self._drop_cancelled()
                else:
                    self._cancelled += 1
                    if self._cancelled >= _COMPACT_AT:
                        self._drop_cancelled()
                return False
            while watch.state == FIRING:
                self._settled.wait()
            return watch.state == FIRED

    def fire_due(self) -> int:
        """Shut down the socket of every armed watch whose instant has passed; how many."""
        due: list[Watch] = []
        with self._lock:
            now = self._clock.monotonic()
            heap = self._heap
            while heap and heap[0][0] <= now:
                watch = heapq.heappop(heap)[2]
                if watch.state == ARMED:
                    watch.state = FIRING
                    due.append(watch)
                else:
                    self._cancelled -= 1
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

    def _drop_cancelled(self) -> None:
        # Under the lock. Disarmed watches at the front go now, so the thread never wakes for
        # one; a heap mostly of disarmed watches (mixed deadlines) is rebuilt.
        heap = self._heap
        while heap and heap[0][2].state != ARMED:
            heapq.heappop(heap)
            self._cancelled -= 1
        if self._cancelled >= _COMPACT_AT and self._cancelled * 2 > len(heap):
            heap[:] = [entry for entry in heap if entry[2].state == ARMED]
            heapq.heapify(heap)
            self._cancelled = 0

    def _run(self) -> None:
        while True:
            with self._lock:
                while True:
                    self._drop_cancelled()
                    heap = self._heap
                    now = self._clock.monotonic()
                    if heap and heap[0][0] <= now:
                        break
                    self._wake_at = heap[0][0] if heap else _INF
                    self._wake.wait(heap[0][0] - now if heap else None)
                self._wake_at = -_INF
            self.fire_due()


WATCHDOG: Final = Watchdog()

# The watch of the try running in this context, set by the deadline stage around each try of
# a call with a deadline; connections arm it. Calls without a deadline never set it.
WATCHED: Final[contextvars.ContextVar[Watch | None]] = contextvars.ContextVar(
    "resilient_session_watch", default=None
)


def settle(watch: Watch) -> bool:
    """End a try's *watch*: True when the watchdog cut the try short."""
    return watch.state > DISARMED and WATCHDOG.disarm(watch)


if hasattr(os, "register_at_fork"):
    # A child has no watchdog thread and a lock that may have been held at the fork.
    os.register_at_fork(after_in_child=WATCHDOG._reset)
