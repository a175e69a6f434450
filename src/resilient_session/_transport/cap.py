"""The response size cap: a body longer than ``retry.max_response_bytes`` ends the call.

urllib3 builds the response itself (``HTTPConnection.getresponse``), so a capped host's
responses change class, once built, to :class:`CappedResponse`: the same object, every
attribute and ``isinstance`` check as before, with reads that stop one byte past the cap.

Two counts are held to the cap, and the first to pass it ends the read:

- the bytes handed to the caller, decoded (``content``, ``iter_content``, ``raw.read``):
  they are what memory holds, so a decompression bomb stops one byte past the cap whatever
  its ratio (urllib3 >= 2.6 decodes each read to at most the size asked for);
- the body's bytes taken off the wire, before decoding and without the chunked framing
  (what ``Content-Length`` counts): a compressed stream that decodes to nothing, endless
  empty deflate blocks, stops there too, and a ``Content-Length`` over the cap fails before
  the body is read.

A third count, every byte http.client takes for the body (chunk sizes, chunk extensions,
CRLFs and the trailer beside the body itself), is held to :func:`wire_limit`: a body of a few
bytes inside endless framing (an endless trailer, kilobytes of extension to every one-byte
chunk) otherwise reads for as long as the upstream sends.

Every read of the body goes through ``_raw_read``: chunked bodies included, since this class
has urllib3 de-chunk them through http.client's ``read`` rather than its own
``read_chunked``, which takes chunks off the socket where no cap can see them.
"""

from __future__ import annotations

import weakref
from collections.abc import Generator
from typing import Any, Final, NoReturn, cast

import requests
from urllib3.response import HTTPResponse

from resilient_session._compat import body_reader
from resilient_session._observe.redact import redact_url
from resilient_session.config import Config
from resilient_session.errors import ResponseTooLarge

# How much a read of "the rest" asks for at a time: the body is never decoded in one piece.
_PIECE: Final = 64 * 1024
# What framing may take beyond as many bytes as the body: a body at the cap sent in chunks of
# 8 bytes or more (5 bytes of framing each), with a trailer, fits.
_FRAMING_ALLOWANCE: Final = 64 * 1024


def wire_limit(cap: int) -> int:
    """The most bytes a body capped at *cap* may take off the wire, its chunked framing
    (chunk sizes, extensions, CRLFs, trailer) included: twice the cap, and 64 KiB."""
    return 2 * cap + _FRAMING_ALLOWANCE


def caps_any(config: Config) -> bool:
    """Whether *config* caps the responses of any host or route, the defaults included."""
    return any(policy.retry.max_response_bytes is not None for policy in config.policies())


def limit_body(response: requests.Response, cap: int, names: frozenset[str]) -> None:
    """Hold *response*'s body to *cap* bytes from now on; *names* are redacted from the URL
    its error shows.

    Raises:
        ResponseTooLarge: the response declares a ``Content-Length`` over *cap*; its
            connection is closed without reading the body.
    """
    raw = response.raw
    # Only urllib3's own class: another (a subclass, a file) keeps its reads as they are.
    if type(raw) is not HTTPResponse:
        return
    capped = CappedResponse.adopt(raw, cap, response, names)
    held = body_reader(raw)
    if held is not None:
        inner, reader = held
        inner.fp = _CountingReader(reader, wire_limit(cap))
    declared = raw.length_remaining
    if declared is not None and declared > cap:
        capped.refuse(declared)


class CappedResponse(HTTPResponse):
    """urllib3's response, reading its body no further than one byte past its cap.

    Not built directly: :meth:`adopt` turns a response urllib3 built into one.
    """

    _cap: int
    _handed: int
    _over: bool
    _owner: weakref.ref[requests.Response]
    _names: frozenset[str]

    @classmethod
    def adopt(
        cls, raw: HTTPResponse, cap: int, owner: requests.Response, names: frozenset[str]
    ) -> CappedResponse:
        raw.__class__ = cls
        capped = cast("CappedResponse", raw)
        capped._cap = cap
        capped._handed = 0
        capped._over = False
        # Weak: the requests response holds this one, and a cycle would keep both (and the
        # body read so far) until the cycle collector runs.
        capped._owner = weakref.ref(owner)
        capped._names = names
        return capped

    # -- the wire count: every body byte urllib3 takes from http.client ---------------------

    def _raw_read(self, amt: int | None = None, *, read1: bool = False) -> bytes:
        # Up to the cap, then one byte: what tells a body of exactly the cap from a longer one.
        room = self._cap - self.tell() or 1
        try:
            data = super()._raw_read(room if amt is None or amt > room else amt, read1=read1)
        except _WireOverLimit:
            # Raised inside http.client's read: urllib3 has closed the connection already.
            self.refuse(framing=True)
        if self.tell() > self._cap:
            self.refuse()
        return data

    def supports_chunked_reads(self) -> bool:
        # read_chunked reads chunks from the socket itself, past _raw_read: http.client's read
        # de-chunks them as well, through it.
        return False

    # -- the decoded count: every byte handed to the caller ----------------------------------

    def read(
        self,
        amt: int | None = None,
        decode_content: bool | None = None,
        cache_content: bool = False,
    ) -> bytes:
        if self._over:
            self.refuse()
        if amt is None or amt < 0:
            return self._read_rest(decode_content)
        room = self._cap - self._handed or 1
        return self._hand(super().read(min(amt, room), decode_content, cache_content))

    def read1(self, amt: int | None = None, decode_content: bool | None = None) -> bytes:
        if self._over:
            self.refuse()
        room = self._cap - self._handed or 1
        if amt is None or amt < 0:
            amt = _PIECE
        return self._hand(super().read1(min(amt, room), decode_content))

    def stream(
        self, amt: int | None = _PIECE, decode_content: bool | None = None
    ) -> Generator[bytes]:
        # Checked here too: once closed, urllib3's stream ends without a read, which would
        # make a body over the cap look empty.
        if self._over:
            self.refuse()
        return super().stream(amt, decode_content)

    def _read_rest(self, decode_content: bool | None) -> bytes:
        # read() of the whole body, one piece at a time: every piece hands at least a byte
        # (an empty one is the end), and at most cap + 1 are handed, so this ends.
        pieces: list[bytes] = []
        while piece := self.read(_PIECE, decode_content):
            pieces.append(piece)
        return b"".join(pieces)

    def _hand(self, data: bytes) -> bytes:
        self._handed += len(data)
        if self._handed > self._cap:
            self.refuse()
        return data

    def refuse(self, declared: int | None = None, *, framing: bool = False) -> NoReturn:
        """Close the connection and raise ResponseTooLarge, now and on every read after;
        *declared* is the ``Content-Length`` that was over the cap, if that was why, and
        *framing* says the body with its framing passed the wire limit."""
        if not self._over:
            self._over = True
            # urllib3's own clean-up of a read that broke: the connection is closed, and
            # handed back closed, so the pool keeps its slot but never reuses the socket.
            self.close()
            self.release_conn()
        owner = self._owner()
        status = owner.status_code if owner is not None else self.status
        url = redact_url(owner.url or "", self._names) if owner is not None else ""
        cap = f"retry.max_response_bytes ({self._cap} bytes)"
        if framing:
            message = (
                f"the body of {status} from {url}, with its chunked framing, is longer than "
                f"{wire_limit(self._cap)} bytes: twice {cap}, and 64 KiB"
            )
        elif declared is None:
            message = f"the body of {status} from {url} is longer than {cap}"
        else:
            message = f"the body of {status} from {url} declares {declared} bytes, more than {cap}"
        raise ResponseTooLarge(
            message,
            limit=self._cap,
            response=owner,
            request=owner.request if owner is not None else None,
        )


class _WireOverLimit(Exception):
    """Raised inside http.client's read once the bytes it took for a body pass the wire limit;
    never a ValueError or an OSError, which http.client and urllib3 would take for a broken
    chunk or a broken connection."""


class _CountingReader:
    """The buffered reader http.client takes a capped body from, counting every byte it hands
    out, framing and body alike; everything else is the reader's own."""

    __slots__ = ("_left", "_reader")

    def __init__(self, reader: Any, limit: int) -> None:
        self._reader = reader
        self._left = limit

    def read(self, *size: Any) -> bytes:
        return self._count(self._reader.read(*size))

    def read1(self, *size: Any) -> bytes:
        return self._count(self._reader.read1(*size))

    def readline(self, *size: Any) -> bytes:
        return self._count(self._reader.readline(*size))

    def readinto(self, buffer: Any) -> int | None:
        count: int | None = self._reader.readinto(buffer)
        self._left -= count or 0
        if self._left < 0:
            raise _WireOverLimit
        return count

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)

    def _count(self, data: bytes) -> bytes:
        self._left -= len(data)
        if self._left < 0:
            raise _WireOverLimit
        return data
