"""The deadline's clamp rule, the one both wires apply to a try's timeouts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resilient_session._pipeline.clamp import clamp, seconds


@pytest.mark.parametrize(
    ("part", "remaining", "expected"),
    [
        (None, 0.8, (0.8, True)),
        (5.0, 0.8, (0.8, True)),
        (0.5, 0.8, (0.5, False)),
        (0.8, 0.8, (0.8, False)),
    ],
)
def test_a_part_longer_than_the_time_left_or_unlimited_is_cut_to_it(part, remaining, expected):
    assert clamp(part, remaining) == expected


@given(
    part=st.none() | st.floats(min_value=0, max_value=1e6),
    remaining=st.floats(min_value=0, max_value=1e6),
)
def test_a_clamped_part_never_outlasts_the_time_left_nor_the_callers_own(part, remaining):
    value, cut = clamp(part, remaining)
    assert value <= remaining
    assert part is None or value <= part
    assert cut == (part is None or part > remaining)


@pytest.mark.parametrize(
    ("given_value", "expected"),
    [(3, 3.0), (0.25, 0.25), (None, None), (True, None), ("5", None), (object(), None)],
)
def test_only_a_real_number_is_a_limit_of_the_callers(given_value, expected):
    assert seconds(given_value) == expected
