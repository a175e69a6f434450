"""Text bound for a terminal or a one-line message: nothing in it can steer the screen."""

from __future__ import annotations

import re

# C0 and C1 controls and DEL: an escape sequence can recolour, move the cursor or retitle a
# terminal, and a CR or LF can forge a line that seems to come from the program. The bidi
# overrides and isolates reorder what a reader sees (CVE-2021-42574, "Trojan Source"). A lone
# surrogate (a JSON "\ud800") cannot be encoded at all: printing it raises UnicodeEncodeError.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def printable(text: str) -> str:
    """*text* with every control and bidi-override character written as a ``\\x``/``\\u`` escape.

    Use it for any text that came from outside (an upstream's reason phrase, a host name in an
    event log, a key in a config file) before it is printed.
    """
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
