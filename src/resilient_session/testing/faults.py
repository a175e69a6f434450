"""What a FlakyUpstream can be scripted to do, one value per step, and its record of a hit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias

MAX_WAIT: Final = 30.0
"""The longest any single step may keep a connection waiting, in seconds."""


def _check_wait(name: str, seconds: float) -> None:
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_WAIT:
        raise ValueError(f"{name} must be between 0 and {MAX_WAIT} seconds, got {seconds!r}")


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer with *status*, *headers* and *body*, after waiting *delay* seconds.

    ``Content-Length`` is added unless *headers* set it; 1xx, 204 and 304 carry no body.

    Example::

        Reply(429, headers={"Retry-After": "1"})
        Reply(200, body=b"ok", delay=0.3)   # a slow but healthy answer
    """

    status: int = 200
    # A dict is unhashable: kept out of the hash so a Reply stays usable in sets.
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)
    body: bytes = b""
    delay: float = 0.0

    def __post_init__(self) -> None:
        if not 100 <= self.status <= 599:
            raise ValueError(f"status must be 100..599, got {self.status}")
        _check_wait("delay", self.delay)


@dataclass(frozen=True, slots=True)
class Hang:
    """Read the request, answer nothing for *seconds*, then close the connection."""

    seconds: float = MAX_WAIT

    def __post_init__(self) -> None:
        _check_wait("seconds", self.seconds)


@dataclass(frozen=True, slots=True)
class ResetMidBody:
    """Promise *declared* body bytes, send *sent*, pause, then abort the connection (TCP RST).

    The pause lets the client read the head and part of the body first, so the failure
    really happens mid-body rather than before the response was seen.
    """

    status: int = 200
    sent: bytes = b"partial body"
    declared: int = 1024
    pause: float = 0.05

    def __post_init__(self) -> None:
        if self.declared <= len(self.sent):
            raise ValueError(
                f"declared ({self.declared}) must exceed the {len(self.sent)} bytes sent"
            )
        _check_wait("pause", self.pause)


@dataclass(frozen=True, slots=True)
class Drip:
    """Answer *status* with a body of *total_bytes* sent *chunk* bytes every *interval* seconds.

    The whole drip is cut after ``MAX_WAIT`` seconds, closing the connection early.
    """

    total_bytes: int
    interval: float
    chunk: int = 1
    status: int = 200

    def __post_init__(self) -> None:
        if self.total_bytes < 0 or self.chunk < 1:
            raise ValueError("total_bytes must be >= 0 and chunk >= 1")
        _check_wait("interval", self.interval)


@dataclass(frozen=True, slots=True)
class Trickle:
    """Answer *status* with *body*, sending the status line and headers one byte every
    *interval* seconds, then the body at once.

    Every byte restarts a client's per-read timeout, so only a bound on the whole try ends
    the wait. The trickle is cut after ``MAX_WAIT`` seconds, closing the connection early.
    """

    interval: float
    status: int = 200
    body: bytes = b"ok"

    def __post_init__(self) -> None:
        if not 100 <= self.status <= 599:
            raise ValueError(f"status must be 100..599, got {self.status}")
        _check_wait("interval", self.interval)


@dataclass(frozen=True, slots=True)
class CloseWithoutReply:
    """Read the request, then close the connection without sending a byte."""


@dataclass(frozen=True, slots=True)
class Flaky:
    """Answer *status* with probability *rate*, else 200 with *body*.

    Each scripted Flaky step draws from its own ``random.Random(seed)``, so a single-threaded
    run is reproducible; with concurrent clients only the overall rate is.
    """

    rate: float
    status: int = 503
    seed: int | None = None
    body: bytes = b"ok"

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"rate must be between 0 and 1, got {self.rate!r}")


Step: TypeAlias = Reply | Hang | ResetMidBody | Drip | Trickle | CloseWithoutReply | Flaky

DEFAULT_REPLY: Final = Reply(200, body=b"ok")


@dataclass(frozen=True, slots=True)
class Hit:
    """One request the upstream received, recorded before it was answered.

    Attributes:
        method: the request method, upper case.
        path: the path, without the query.
        target: the request target as sent, query included.
        headers: every header as ``(name, value)`` pairs, in the order received.
        body: the request body.
        client: the client's ``(host, port)``.
        connection: the serial number of the TCP connection it came on, from 1.
        at: when it was received, in ``time.monotonic()`` seconds.
    """

    method: str
    path: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    client: tuple[str, int]
    connection: int
    at: float

    def header(self, name: str) -> str | None:
        """The first value of header *name* (case-insensitive), or None when absent."""
        wanted = name.lower()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value
        return None
