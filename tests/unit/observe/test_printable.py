from hypothesis import given
from hypothesis import strategies as st

from resilient_session._observe.printable import printable


def test_plain_text_is_unchanged():
    text = "GET https://a.test/p?x=1 (3 tries) é ✓"
    assert printable(text) == text


def test_escape_sequences_and_line_breaks_are_spelled_out():
    assert printable("OK\x1b[2J\r\nforged: ok\x07") == "OK\\x1b[2J\\x0d\\x0aforged: ok\\x07"
    assert printable("a\x7fb\x9bc") == "a\\x7fb\\x9bc"


def test_bidi_overrides_are_spelled_out():
    assert printable("user\u202eadmin\u2066") == "user\\u202eadmin\\u2066"


def test_lone_surrogates_are_spelled_out():
    """A lone surrogate, which no encoding can print, is written as its escape."""
    shown = printable("h\ud800\udfffost")
    assert (shown, shown.encode("utf-8")) == ("h\\ud800\\udfffost", b"h\\ud800\\udfffost")


@given(st.text())
def test_nothing_unsafe_survives(text):
    shown = printable(text)
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in shown)
    assert not any(ch in shown for ch in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
