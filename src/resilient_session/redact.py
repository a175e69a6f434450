"""Making URLs safe to log: userinfo dropped, sensitive query values replaced."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from urllib.parse import unquote_plus, urlsplit, urlunsplit

SENSITIVE_PARAMS = frozenset(
    {
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "api_key",
        "apikey",
        "key",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "signature",
        "sig",
        "code",
        "auth",
    }
)

REDACTED = "REDACTED"


def sensitive_names(extra: Iterable[str] = ()) -> frozenset[str]:
    """The built-in names plus *extra*, lower-cased, ready for :func:`redact_url`."""
    return SENSITIVE_PARAMS | {name.lower() for name in extra}


def redact_url(url: str, names: frozenset[str] = SENSITIVE_PARAMS) -> str:
    """*url* without userinfo or fragment, and with the values of sensitive parameters hidden.

    Non-sensitive parameters keep their original encoding, so the logged URL still matches
    what went on the wire.
    """
    base, _, query = url.partition("?")
    if "#" not in url and "@" not in base and not _might_hold(query, names):
        return url  # Nothing to hide: the common case, answered without parsing.
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = parts.query
    if query:
        query = "&".join(_redact_pair(pair, names) for pair in query.split("&"))
    # The fragment never goes on the wire and OAuth flows put tokens there.
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _redact_pair(pair: str, names: frozenset[str]) -> str:
    name = pair.partition("=")[0]
    if unquote_plus(name).strip().lower() in names:
        return f"{name}={REDACTED}"
    return pair


def _might_hold(query: str, names: frozenset[str]) -> bool:
    """True when some parameter of *query* may be sensitive (a cheap over-approximation)."""
    if not query:
        return False
    if "%" in query or "+" in query or not query.isascii():
        # An encoded name could spell a sensitive one, and str.lower() of non-ASCII text can
        # differ from a case-blind match: let the exact path decide.
        return True
    return _name_pattern(names).search(query) is not None


@functools.lru_cache(maxsize=32)
def _name_pattern(names: frozenset[str]) -> re.Pattern[str]:
    # A parameter whose name, whitespace around it and case aside, is one of *names*: for
    # ASCII text the same test as pair.partition("=")[0].strip().lower() in names, in one
    # search.
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?:^|&)\s*(?:{alternatives})\s*(?:=|&|$)", re.IGNORECASE)
