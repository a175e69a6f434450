"""Full-jitter backoff bounds and Retry-After parsing."""

from __future__ import annotations

import math
import random
from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resilient_session._pipeline.backoff import full_jitter, overload_backoff, parse_retry_after

NOW = 1_700_000_000.0


@given(
    retry=st.integers(min_value=1, max_value=10_000),
    base=st.floats(min_value=1e-3, max_value=10),
    cap=st.floats(min_value=1e-3, max_value=100),
    seed=st.integers(),
)
def test_full_jitter_within_bounds(retry, base, cap, seed):
    """The wait before retry k lies in [0, min(cap, base * 2**(k-1))], even for huge k."""
    wait = full_jitter(retry, base, cap, random.Random(seed))
    assert 0 <= wait <= min(cap, base * 2.0 ** min(retry - 1, 1000))


@given(retry=st.integers(min_value=1, max_value=60), seed=st.integers())
def test_overload_doubles_the_base(retry, seed):
    """Overload backoff before retry k lies in [0, min(cap, base * 2**k)]."""
    wait = overload_backoff(retry, 0.5, 1e9, random.Random(seed))
    assert 0 <= wait <= 0.5 * 2.0**retry


def test_full_jitter_spreads():
    """Full jitter uses the whole window, not just its top: 1,000 draws span most of it."""
    rng = random.Random(1)
    waits = [full_jitter(4, 0.5, 8.0, rng) for _ in range(1000)]
    assert min(waits) < 0.2
    assert max(waits) > 3.8


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("120", 120.0),
        ("  3 ", 3.0),
        ("2.5", 2.5),
        (None, None),
        ("", None),
        ("1e300", 1e300),
        ("1e400", math.inf),
        ("9" * 400, math.inf),
        ("inf", math.inf),
        ("+Infinity", math.inf),
        ("-1", None),
        ("-1e-9", None),
        ("-inf", None),
        ("-1e400", None),
        ("nan", None),
        ("-NaN", None),
        ("soon", None),
        ("0x10", None),
        ("Wed, 99 Foo", None),
    ],
)
def test_parse_retry_after_seconds_and_garbage(value, expected):
    """delay-seconds parse, a delay past a float's range is infinite; garbage, negative and
    NaN values give None."""
    assert parse_retry_after(value, NOW) == expected


@pytest.mark.parametrize("value", ["-0", "-0.0", "+0", "0e5", "-0e-5"])
def test_parse_retry_after_zero_is_positive_zero(value):
    """Every spelling of zero, "-0" included, is a wait of +0.0, never -0.0."""
    # repr tells the zeros apart: -0.0 == 0.0 holds.
    assert repr(parse_retry_after(value, NOW)) == "0.0"


def test_parse_retry_after_http_date():
    """An HTTP-date gives the seconds until it; a past date gives 0."""
    assert parse_retry_after(formatdate(NOW + 90, usegmt=True), NOW) == pytest.approx(90, abs=1)
    assert parse_retry_after(formatdate(NOW - 90, usegmt=True), NOW) == 0.0


def test_parse_retry_after_obsolete_date_forms():
    """RFC 850 and asctime dates, which RFC 9110 still asks recipients to accept, parse too."""
    assert parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", 784111777.0 - 7) == pytest.approx(7)
    assert parse_retry_after("Sun Nov  6 08:49:37 1994", 784111777.0 - 7) == pytest.approx(7)
