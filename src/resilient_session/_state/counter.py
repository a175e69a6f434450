"""A count that many threads add to without a lock, and that its owner reads exactly."""

from __future__ import annotations

import itertools


class Tally:
    """``next(tally.ticks)`` adds one: a single call into C, which the GIL runs whole, so a
    count kept on the happy path needs no lock. Reading takes a tick as well, and ``value``
    subtracts the reads: call it under the owner's lock, so that no two reads interleave.
    """

    # hot path: lock-free-counts
    __slots__ = ("_reads", "ticks")

    def __init__(self) -> None:
        self.ticks = itertools.count()
        self._reads = 0

    def value(self) -> int:
        """The ones added so far."""
        reads = self._reads
        self._reads = reads + 1
        return next(self.ticks) - reads
