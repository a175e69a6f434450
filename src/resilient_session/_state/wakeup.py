"""Waking a task that waits on an event loop from any thread: a sync caller's, another loop's,
or the task's own loop's.

The guards are shared by threads and by tasks on any number of loops, so whoever frees what a
task waits for (a limit's slot, the listener taking in a pushed opening) may be on another
thread. anyio's ``from_thread.run_sync`` blocks the caller until the loop has run the call,
and refuses to run on a loop's own thread, so a task is woken through the one non-blocking
entry each loop has for other threads: asyncio's ``loop.call_soon_threadsafe``, trio's
``TrioToken.run_sync_soon``. Either costs a write to the loop's wake-up socket, paid only
when someone waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class TaskWakeup:
    """One wait of one task: made in the waiting task, woken from anywhere, used once.

    Must be made inside a running asyncio or trio loop (anyio's backends).
    """

    __slots__ = ("_event", "_soon")

    def __init__(self) -> None:
        # anyio comes with the httpx extra: imported here, by an async caller only.
        import anyio

        self._soon = _call_soon_on_this_loop()
        self._event = anyio.Event()

    def wake(self) -> bool:
        """Wake the task, from any thread, without blocking; False when its loop has closed
        (no task is left there to wake)."""
        try:
            self._soon(self._event.set)
        except RuntimeError:  # asyncio's closed loop; trio's RunFinishedError is one too
            return False
        return True

    async def wait(self, seconds: float) -> bool:
        """Until woken or *seconds* of real time pass: True when woken. Cancellable."""
        import anyio

        with anyio.move_on_after(seconds):
            await self._event.wait()
        return self._event.is_set()


def wake_all(wakeups: list[TaskWakeup] | None) -> bool:
    """Wake each of *wakeups* (None: none); False when one's loop had closed, so the wake it
    stood for went to nobody."""
    delivered = True
    for wakeup in wakeups or ():
        delivered = wakeup.wake() and delivered
    return delivered


def _call_soon_on_this_loop() -> Callable[[Callable[[], Any]], Any]:
    """The running loop's entry for other threads."""
    import asyncio

    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:
        pass
    try:
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    except (ImportError, RuntimeError):
        raise RuntimeError("await this inside an asyncio or trio event loop") from None
