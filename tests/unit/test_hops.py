"""Reading X-Request-Timeout-Ms and X-Request-Attempt: every malformed shape reads as absent."""

from __future__ import annotations

import pytest

from resilient_session._hops import (
    AttemptHeader,
    format_attempt,
    parse_attempt,
    parse_timeout_ms,
    single,
)

MAX_MS = 300_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("250", 250),
        (" 250 ", 250),
        ("\t250\t", 250),
        ("0", 0),
        ("000250", 250),
        ("300000", 300_000),
    ],
)
def test_timeout_values_read(value, expected):
    """Integer milliseconds, with optional whitespace around them, up to max_ms."""
    assert parse_timeout_ms(value, MAX_MS) == expected


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        " ",
        "\t \t",
        "-5",
        "-0",
        "+5",
        "1.5",
        "250.",
        ".5",
        "NaN",
        "nan",
        "inf",
        "-inf",
        "Infinity",
        "1e3",
        "0x10",
        "250ms",
        "2 50",
        "300001",
        "9" * 16,
        "9" * 5000,
        "\u0661\u0662\u0663",  # Arabic-Indic digits: isdigit() says yes, HTTP no
        "\uff12\uff15\uff10",  # fullwidth digits
        "250\x00",
        "250\r\n",
        "250, 300",
        "250,250",
        "250;q=1",
    ],
)
def test_timeout_malformed_negative_absurd_ignored(value):
    """A value that is not plain ASCII milliseconds within max_ms reads as no header."""
    assert parse_timeout_ms(value, MAX_MS) is None


def test_timeout_above_a_lower_max_ms_ignored():
    """max_ms is the configured bound, not a constant."""
    assert (parse_timeout_ms("1000", 1000), parse_timeout_ms("1001", 1000)) == (1000, None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1; max=4", AttemptHeader(1, 4)),
        ("1;max=4", AttemptHeader(1, 4)),
        ("  2 ;\tmax = 4 ".replace(" = ", "="), AttemptHeader(2, 4)),
        ("4; max=4", AttemptHeader(4, 4)),
        ("1; max=1", AttemptHeader(1, 1)),
        ("1; MAX=3", AttemptHeader(1, 3)),
        ("1; max=3; hop=b", AttemptHeader(1, 3)),
        ("1; hop=b; max=3", AttemptHeader(1, 3)),
        ("01; max=03", AttemptHeader(1, 3)),
        ("1; max=999999999", AttemptHeader(1, 999_999_999)),
    ],
)
def test_attempt_values_read(value, expected):
    """n; max=m with 1 <= n <= m; well-formed extra parameters are ignored."""
    assert parse_attempt(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        " ",
        "1",
        "1;",
        "1; ",
        "1; max",
        "1; max=",
        "1; =4",
        "1; max=x",
        "0; max=4",
        "0; max=0",
        "5; max=4",
        "-1; max=4",
        "1; max=-4",
        "+1; max=4",
        "1; max=+4",
        "1; max=4; max=4",
        "1; max=4; max=5",
        "1; max=4;;",
        "1;; max=4",
        "1; max=4; hop",
        "1; max=4; hop=",
        "1; max=4; h p=1",
        '1; max=4; hop="b"',
        '1; max="4"',
        "NaN; max=4",
        "1; max=NaN",
        "inf; max=inf",
        "1.0; max=4",
        "1; max=4.0",
        "1e0; max=4",
        "1 2; max=4",
        "\u0661; max=\u0664",
        "é; max=4",
        "1; max=4é",
        "1; max=9999999999",
        "9999999999; max=9999999999",
        "9" * 5000 + "; max=4",
        "1; max=4, 2; max=4",
        "attempt=1; max=4",
        "max=4",
        "; max=4",
        "1, max=4",
        "1; max=4\x00",
        "garbage",
    ],
)
def test_attempt_malformed_ignored(value):
    """Every shape outside the grammar reads as no header, never an error."""
    assert parse_attempt(value) is None


def test_caller_retries_only_before_its_last_try():
    """n < max says the caller may try again; n == max is its last try."""
    assert [AttemptHeader(n, 3).caller_retries for n in (1, 2, 3)] == [True, True, False]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ((), None),
        (("250",), "250"),
        (("250", "250"), None),
        (("250", "300"), None),
        (("250, 300",), None),
        (("1; max=4,1; max=4",), None),
    ],
)
def test_single_value_or_none(values, expected):
    """Several values of one header, as duplicate fields or comma-joined, read as none."""
    assert single(values) == expected


def test_format_round_trips():
    """What the library sends, it reads back."""
    assert format_attempt(2, 4) == "2; max=4"
    assert parse_attempt(format_attempt(2, 4)) == AttemptHeader(2, 4)
