"""Fixed-size summaries of unbounded streams: quantiles of values, and how many distinct keys.

Both keep the same few kilobytes however many items they are fed, which is what lets ``stats``
read an event log of any length in bounded memory.
"""

from __future__ import annotations

import hashlib
import math
from typing import Final

# Quantiles are reported within this fraction of the exact value.
RELATIVE_ERROR: Final = 0.01

# 2**12 registers of one byte: a standard error of 1.04 / sqrt(4096), about 1.6 %.
_PRECISION: Final = 12
_REGISTERS: Final = 1 << _PRECISION
_REST_BITS: Final = 64 - _PRECISION


class LogHistogram:
    """Counts of non-negative values in logarithmic buckets (the DDSketch layout).

    Bucket k holds the values in ``(gamma**(k-1), gamma**k]`` with
    ``gamma = (1 + relative_error) / (1 - relative_error)``, and a quantile is reported as the
    bucket's midpoint ``2 * gamma**k / (gamma + 1)``, which is within *relative_error* of every
    value in the bucket. So a reported quantile is within *relative_error* (1 % by default) of
    the exact nearest-rank quantile. Values below *min_value* count as 0 and values above
    *max_value* as *max_value*, so there are at most ``log(max_value / min_value) / log(gamma)``
    buckets (about 1,400 with the defaults) however many values are added.
    """

    def __init__(
        self,
        relative_error: float = RELATIVE_ERROR,
        min_value: float = 1e-6,
        max_value: float = 1e6,
    ) -> None:
        if not 0 < relative_error < 1:
            raise ValueError(f"relative_error must be in (0, 1), got {relative_error}")
        if not 0 < min_value < max_value:
            raise ValueError(f"need 0 < min_value < max_value, got {min_value}, {max_value}")
        self.relative_error = relative_error
        self._gamma = (1 + relative_error) / (1 - relative_error)
        self._log_gamma = math.log(self._gamma)
        self._min_value = min_value
        self._max_value = max_value
        self._buckets: dict[int, int] = {}
        self._zeros = 0
        self.count = 0

    @property
    def bucket_count(self) -> int:
        """Buckets in use, zeros included; bounded by the range, not by ``count``."""
        return len(self._buckets) + (1 if self._zeros else 0)

    def add(self, value: float) -> None:
        """Count one value; negative values are a caller's bug."""
        if value < 0 or math.isnan(value):
            raise ValueError(f"histogram values must be >= 0, got {value}")
        self.count += 1
        if value < self._min_value:
            self._zeros += 1
            return
        key = math.ceil(math.log(min(value, self._max_value)) / self._log_gamma)
        self._buckets[key] = self._buckets.get(key, 0) + 1

    def quantile(self, q: float) -> float | None:
        """The nearest-rank *q*-quantile (0 < q <= 1) within the relative error; None if empty."""
        if not 0 < q <= 1:
            raise ValueError(f"quantile must be in (0, 1], got {q}")
        if self.count == 0:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = self._zeros
        if seen >= rank:
            return 0.0
        for key in sorted(self._buckets):
            seen += self._buckets[key]
            if seen >= rank:
                return 2 * self._gamma**key / (self._gamma + 1)
        raise AssertionError("bucket counts do not add up to count")  # pragma: no cover


class DistinctCounter:
    """An estimate of how many distinct strings were added, in 4 KiB (HyperLogLog).

    Flajolet et al. 2007, with a 64-bit hash (so no large-range correction is needed) and
    linear counting while registers are still empty, which is near exact for small counts.
    The standard error is about 1.6 %; the hash is keyed by nothing, so the same input always
    gives the same estimate.
    """

    def __init__(self) -> None:
        self._registers = bytearray(_REGISTERS)

    def add(self, key: str) -> None:
        """Count *key*; adding it again changes nothing."""
        # surrogatepass: a JSON string may hold a lone surrogate, which strict UTF-8 refuses.
        data = key.encode("utf-8", "surrogatepass")
        hashed = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
        index = hashed >> _REST_BITS
        rank = _REST_BITS - (hashed & ((1 << _REST_BITS) - 1)).bit_length() + 1
        if rank > self._registers[index]:
            self._registers[index] = rank

    def estimate(self) -> int:
        """The number of distinct keys added, within about 1.6 % (one standard error)."""
        registers = self._registers
        empty = registers.count(0)
        raw = (0.7213 / (1 + 1.079 / _REGISTERS)) * _REGISTERS**2
        raw /= math.fsum(2.0**-rank for rank in registers)
        if raw <= 2.5 * _REGISTERS and empty:
            return round(_REGISTERS * math.log(_REGISTERS / empty))
        return round(raw)
