"""The listener's socket as the callers see it: before a try goes out, a look whether an
opening may lie there unread, and a wait (bounded, and paid for) for the listener to take it in.

A worker's listener thread (``push``) follows an opening once the scheduler runs it, which on
a machine with fewer cores than busy workers can be milliseconds after the message reached its
socket; a try that goes out meanwhile reaches a host the fleet has opened. So a try looks at
that socket first. What lies there unread may be an opening, or anything else anyone who may
publish on the channel sent: the look cannot tell, and the holds it causes are bounded so that
a flood costs the callers a small share of their time.

An async caller looks the same way (``aheed``), and is held the same way, on the same credit,
but awaits the listener on its event loop instead of blocking it: the listener wakes a held
task through the task's loop (``_state/wakeup.py``), as it notifies a held thread.
"""

from __future__ import annotations

import contextlib
import select
import threading
from typing import Any, Final

from resilient_session._state.wakeup import TaskWakeup, wake_all
from resilient_session.clock import SYSTEM_CLOCK

# A try waits this long at most for the listener to take in what its socket holds; a listener
# that takes longer is not waited for again until it takes something in.
_HEED_WITHIN: Final = 0.05
# The socket cannot tell what it holds until the listener parses it: junk, or an opening of a
# host this process does not hold, holds the tries as long as an opening would. Such holds are
# paid from a credit of this share of the time (at most _HEED_WITHIN saved up), so a flood on
# the channel costs the callers this share of their time at most. A hold that ends in an
# opening followed here costs nothing: the tries held would have been refused.
_HOLD_SHARE: Final = 0.02
# The socket is looked at once in this long at most, by whichever try comes first: a system
# call costs a canned call ~25 µs on a VM (more than its own ~1.5 µs: the caches it leaves
# cold), and this bounds it at one per 2 ms. A worker sending tries further apart than this,
# as a worker on a host that went down does, looks before each of them.
_LOOK_EVERY: Final = 0.002


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
                tasks = list(self._tasks_held)
                self._tasks_held.clear()
            # Outside the lock: a wake-up is a write to the held task's loop.
            wake_all(tasks)

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
        # The wake-ups of the tasks held now, each awaiting the listener's next read.
        self._tasks_held: dict[TaskWakeup, None] = {}
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

    async def aheed(self) -> None:
        """:meth:`heed` for a task: the same look, and the same hold on the same credit, awaited
        on the task's event loop (asyncio or trio), which it never blocks. No lock is held
        across the wait; a task cancelled while held is paid for as far as it waited."""
        fd = self._fd
        if fd < 0 or self._stalled:
            return
        # heed()'s look, written out as there: it runs before every try, and a shared helper
        # would cost each try a frame.
        if not self._unread_seen:
            now = _monotonic()
            if now < self._next_look and not self._looking:
                return
            self._next_look = now + _LOOK_EVERY
            self._looking = True
            unread = _unread(fd)
            if unread:
                self._unread_seen = True
            self._looking = False
            if not unread:
                return
        if threading.get_ident() == self._listener:
            return
        await self._ahold(fd)
        self._unread_seen = False

    def _hold(self, fd: int) -> None:
        """Under the lock: wait for the listener, as long as the credit allows, and pay for the
        wait unless it ended in an opening followed."""
        hold = self._begin_hold()
        if hold is None:
            return
        began, credit, reads, followed = hold
        waited_out = False
        try:
            taken_in = self._taken.wait_for(lambda: self._taken_in(fd, reads, followed), credit)
            waited_out = not taken_in
        finally:
            self._end_hold(began, reads, followed, waited_out)

    async def _ahold(self, fd: int) -> None:
        """A task's hold: as :meth:`_hold`, the wait awaited with the lock released."""
        with self._taken:
            hold = self._begin_hold()
        if hold is None:
            return
        began, credit, reads, followed = hold
        wakeup: TaskWakeup | None = None
        # A hold cancelled part way says nothing of the listener: only one that waited its
        # whole credit out may mark it stalled.
        waited_out = False
        try:
            while True:
                with self._taken:
                    if wakeup is not None:
                        self._tasks_held.pop(wakeup, None)
                    # Put out before the look: a read the look misses wakes it.
                    wakeup = TaskWakeup()
                    self._tasks_held[wakeup] = None
                if self._taken_in(fd, reads, followed):
                    return
                remaining = began + credit - _monotonic()
                if remaining <= 0.0:
                    waited_out = True
                    return
                await wakeup.wait(remaining)
        finally:
            with self._taken:
                if wakeup is not None:
                    self._tasks_held.pop(wakeup, None)
                self._end_hold(began, reads, followed, waited_out)

    def _begin_hold(self) -> tuple[float, float, int, int] | None:
        """Under the lock: a hold begins, if the credit allows one (None otherwise): when,
        for how long at most, and the listener's counts as it began."""
        began = _monotonic()
        credit = min(_HEED_WITHIN, self._credit + (began - self._credited_at) * _HOLD_SHARE)
        self._credit, self._credited_at = credit, began
        if credit <= 0.0:
            return None
        self._holding += 1
        return began, credit, self._reads, self._followed

    def _taken_in(self, fd: int, reads: int, followed: int) -> bool:
        """Whether a hold that began at counts *reads* and *followed* may end: an opening
        followed, two reads over, another socket, or nothing left unread on this one."""
        return (
            self._followed != followed
            or self._reads - reads >= 2
            or self._fd != fd
            or not _unread(fd)
        )

    def _end_hold(self, began: float, reads: int, followed: int, waited_out: bool) -> None:
        """Under the lock: the hold is over; paid for unless it ended in an opening followed.
        *waited_out*: it ended by its time running out, the listener not done."""
        self._holding -= 1
        if self._followed == followed:
            # Concurrent holds are each paid: a flood costs the credit faster, never longer.
            ended = _monotonic()
            self._credit -= ended - began
            if self._credit < 0.0:
                # Nor is the socket looked at until the credit is back: under a flood a look
                # hands the interpreter to the listener, and the caller waits to get it back.
                self._next_look = ended - self._credit / _HOLD_SHARE
        if waited_out and self._reads == reads:
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
