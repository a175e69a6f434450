"""What the async stages ask of a wire beyond ``_pipeline/wire.py``: a bound a task can be
cut by, and the release of an answer whose body is read by awaiting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from resilient_session._pipeline.wire import Answer, Wire

if TYPE_CHECKING:
    from resilient_session._state.runtime import Runtime


class ScopedBound(Protocol):
    """An async try's bound: a scope that may swallow the cancellation it caused."""

    @property
    def fired(self) -> bool:
        """After the try: True when the bound cut it short."""
        ...

    def __enter__(self) -> ScopedBound: ...

    def __exit__(self, *exc_info: object) -> bool: ...


class AsyncWire(Wire[Any, Any], Protocol):
    """A wire whose tries may also be awaited (the async stages hold its requests and answers
    as ``Any``, as the sync ones do)."""

    def abounded(self, remaining: float) -> ScopedBound:
        """A bound that cancels the task's try *remaining* seconds from now, wherever it waits
        (a cancel scope): entered and left without an ``await``, read after (``fired``)."""
        ...

    async def arelease(
        self, answer: Answer, deadline_at: float | None, runtime: Runtime
    ) -> Exception | None:
        """``Wire.release`` for an answer whose body is read by awaiting."""
        ...
