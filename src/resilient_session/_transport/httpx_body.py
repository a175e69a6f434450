"""An httpx answer's body under the call's rules: the host's size cap on every read, and the
caller's deadline on each chunk of a body read inside the try.

httpx reads a body through ``response.stream``; the transport puts one of these in its place,
so the rules hold whoever reads (the transport inside the try, or the caller of a streamed
call afterwards) and whatever reads (``read``, ``iter_bytes``, ``iter_raw``). Each chunk
waits at most the try's read timeout, which the deadline stage clamped to what was left when
the try began; the deadline is checked between chunks, so a body trickling in past the
deadline ends within one read of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, cast

import httpx

from resilient_session._observe.redact import redact_url

from .httpx_errors import DeadlineExceeded, ResponseTooLarge

if TYPE_CHECKING:
    from resilient_session._pipeline.attempt import Call


class Rules:
    """The checks one body's chunks go through; shared by the sync and the async stream."""

    __slots__ = ("_call", "_limit", "_request", "_response", "_seen", "deadline_at")

    def __init__(
        self,
        call: Call,
        request: httpx.Request,
        response: httpx.Response,
        limit: int | None,
        deadline_at: float | None,
    ) -> None:
        self._call = call
        self._request = request
        self._response = response
        self._limit = limit
        self._seen = 0
        self.deadline_at = deadline_at

    def declared_over(self) -> ResponseTooLarge | None:
        """The error for a ``Content-Length`` over the cap, before a byte is read."""
        limit = self._limit
        length = self._response.headers.get("Content-Length")
        if limit is None or length is None or not length.isdigit() or int(length) <= limit:
            return None
        return self._too_large()

    def check(self, chunk: bytes) -> None:
        """Raise when *chunk* crosses the cap, or came after the deadline."""
        limit = self._limit
        if limit is not None:
            self._seen += len(chunk)
            if self._seen > limit:
                raise self._too_large()
        deadline_at = self.deadline_at
        call = self._call
        if deadline_at is not None and call.runtime.clock.monotonic() >= deadline_at:
            raise DeadlineExceeded(
                f"deadline for {call.method} {call.state.key} ran out during the body",
                request=self._request,
            )

    def _too_large(self) -> ResponseTooLarge:
        url = redact_url(str(self._request.url), self._call.runtime.redact)
        return ResponseTooLarge(
            f"response {self._response.status_code} from {url} is over the cap of "
            f"{self._limit} bytes",
            request=self._request,
            limit=self._limit or 0,
            response=self._response,
        )


class CheckedStream(httpx.SyncByteStream):
    """A sync body read under ``Rules``; closing it closes the body it reads."""

    def __init__(self, inner: httpx.SyncByteStream, rules: Rules) -> None:
        self._inner = inner
        self.rules = rules

    def __iter__(self) -> Iterator[bytes]:
        over = self.rules.declared_over()
        if over is not None:
            raise over
        for chunk in self._inner:
            self.rules.check(chunk)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class AsyncCheckedStream(httpx.AsyncByteStream):
    """An async body read under ``Rules``; closing it closes the body it reads."""

    def __init__(self, inner: httpx.AsyncByteStream, rules: Rules) -> None:
        self._inner = inner
        self.rules = rules

    async def __aiter__(self) -> AsyncIterator[bytes]:
        over = self.rules.declared_over()
        if over is not None:
            raise over
        chunks = aiter(self._inner)
        async for chunk in chunks:
            try:
                self.rules.check(chunk)
            except (DeadlineExceeded, ResponseTooLarge):
                await _unwind(chunks)
                raise
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


# Chunks pulled to end the body's generators: what httpcore has read but not yet handed on
# comes without a wait, a chunk at a time, and a body in memory is short.
_UNWIND_PULLS = 64


async def _unwind(chunks: AsyncIterator[bytes]) -> None:
    """End the generators that read the body beneath *chunks* (httpx's and httpcore's), in
    this task: each pull is cancelled at its first wait, so the cancellation runs through
    every one of them, and httpcore closes the connection as for any cut read. Left suspended
    instead, they are finalized later by the loop: asyncio closes them on another turn, trio
    warns (ResourceWarning) for each."""
    import anyio  # only async calls load it

    with anyio.CancelScope() as scope:
        scope.cancel()
        for _ in range(_UNWIND_PULLS):
            try:
                await anext(chunks)
            # Ended, at its end or by an error of its own: the check's error is the one raised.
            except Exception:  # noqa: BLE001
                return


def checked(
    call: Call,
    request: httpx.Request,
    response: httpx.Response,
    deadline_at: float | None,
    *,
    awaited: bool = False,
) -> Rules | None:
    """Put *response*'s body under the host's cap and, when *deadline_at* is given, the
    deadline, read by awaiting when *awaited* (a body of bytes is both kinds of stream, and
    only the caller knows which it reads); None (nothing done) when neither applies."""
    limit = call.policy.retry.max_response_bytes  # the call's own: settings() may set it
    if limit is None and deadline_at is None:
        return None
    rules = Rules(call, request, response, limit, deadline_at)
    stream = response.stream
    if awaited:
        response.stream = AsyncCheckedStream(cast(httpx.AsyncByteStream, stream), rules)
    else:
        response.stream = CheckedStream(cast(httpx.SyncByteStream, stream), rules)
    return rules


def unbound_deadline(response: httpx.Response) -> None:
    """Once the try has read the body, a later read of it (there is none to make) is the
    caller's: the deadline stops at the try's end."""
    stream = response.stream
    if isinstance(stream, CheckedStream | AsyncCheckedStream):
        stream.rules.deadline_at = None
