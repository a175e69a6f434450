"""Making URLs and messages safe to log: userinfo and fragments dropped, secret values hidden."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote_plus

# As commonly spelt; held in one spelling (see fold_name), so access-token is access_token.
_BUILT_IN = (
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
    # Pre-signed cloud storage URLs carry their credentials in the query.
    "x-amz-signature",
    "x-amz-security-token",
    "x-amz-credential",
    "x-goog-signature",
    "x-goog-credential",
    "private_token",
    "auth_token",
    "jwt",
    "session",
    "sessionid",
    # Servlet containers put the session id in a path parameter (/p;jsessionid=...).
    "jsessionid",
    "pwd",
    "pass",
    "bearer",
    "authorization",
    "client_assertion",
    "credential",
    "x-api-key",
    "access_key",
    "secret_key",
    # OAuth 1.0a may send its protocol parameters in the query (RFC 5849 §3.5.3).
    "oauth_token",
    "oauth_signature",
    # camelCase spellings, matched case-blind as all names are.
    "accesstoken",
    "authtoken",
    "sessiontoken",
    # PHP's and ASP.NET's session cookies, when a framework puts them in the URL.
    "phpsessid",
    "asp.net_sessionid",
    "otp",
    # A CAS service ticket (?ticket=ST-...) logs its holder in until it is first used.
    "ticket",
    "csrf_token",
)

REDACTED = "REDACTED"

# The separators between query parameters (HTML 4.01 §B.2.2 allows ';' beside '&'), kept.
_PAIRS = re.compile(r"([&;])")
# The parts of an array-style name: user[password] is sensitive through "password".
_NAME_PARTS = re.compile(r"[\[\]]")


def fold_name(name: str) -> str:
    """*name* as names are compared: whitespace around it and case aside, ``-`` and ``_``
    alike (``Access-Key`` and ``access_key`` are one name)."""
    return name.strip().lower().replace("-", "_")


SENSITIVE_PARAMS = frozenset(fold_name(name) for name in _BUILT_IN)


def sensitive_names(extra: Iterable[str] = ()) -> frozenset[str]:
    """The built-in names plus *extra*, folded (:func:`fold_name`), ready for
    :func:`redact_url`."""
    return SENSITIVE_PARAMS | {fold_name(name) for name in extra}


def redact_url(url: str, names: frozenset[str] = SENSITIVE_PARAMS) -> str:
    """*url* without userinfo or fragment, and with the values of sensitive parameters hidden.

    A parameter is sensitive when its name, or any bracketed part of an array-style name
    (``token[]``, ``user[password]``), is one of *names* (folded, as :func:`sensitive_names`
    gives them), whatever its case and whichever of ``-`` and ``_`` it is spelt with; query
    parameters split on ``&`` or ``;``, and path parameters (``/p;jsessionid=...``) are
    covered too.
    Non-sensitive parameters keep their original encoding, so the logged URL still matches
    what went on the wire. Never raises, even for a URL that does not parse.
    """
    base, _, query = url.partition("?")
    if "#" not in url and "@" not in url and ";" not in base and not _might_hold(query, names):
        return url  # Nothing to hide: the common case, answered without parsing.
    return _redact_reference(url, names, absolute=True)


def redact_store_url(url: str) -> str:
    """A state store's *url* (``redis://``, ``unix://``) without anything before its last
    ``@``, then as :func:`redact_text` leaves it.

    A password a URL parser would split (an unescaped ``/``, ``?`` or ``#``, common in base64
    secrets) still ends at the last ``@``, and a store's URL has no ``@`` elsewhere.
    """
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        rest = rest.rpartition("@")[2]
    return redact_text(scheme + sep + rest)


def redact_store_message(message: str, url: str) -> str:
    """*message*, written by a client library about the store's *url*, without any piece of
    that URL's userinfo: a parser that split the password may quote part of it (as a port)."""
    userinfo = url.partition("://")[2].rpartition("@")[0]
    for piece in sorted(re.split(r"[:/?#]", userinfo), key=len, reverse=True):
        if piece:
            message = message.replace(piece, "REDACTED")
    return redact_text(message)


def redact_text(text: str, names: frozenset[str] = SENSITIVE_PARAMS) -> str:
    """*text* with every URL in it redacted as :func:`redact_url` does, and every
    ``name=value`` pair of a sensitive name anywhere in it hidden.

    For messages written by others (urllib3's ``Max retries exceeded with url:
    /p?token=... (Caused by ...)``): absolute URLs, and the path-and-query form urllib3 uses,
    lose userinfo, fragment and secret values. Never raises.
    """
    kept: list[str] = []
    position = 0
    while (found := _IN_TEXT.search(text, position)) is not None:
        kept.append(text[position : found.start()])
        position = found.end()
        url = found.group("absolute")
        if url is not None:
            url = _redact_reference(url, names, absolute=True)
            # A URL inside this one (?next=http://user:pw@...) keeps no userinfo either.
            kept.append(_USERINFO.sub(r"\g<scheme>", url))
        elif (url := found.group("relative")) is not None:
            kept.append(_USERINFO.sub(r"\g<scheme>", _redact_reference(url, names, absolute=False)))
        else:
            # Only the name and '=' were taken, so a URL that follows is still seen as one.
            kept.append(found.group())
            if is_sensitive(found.group("name"), names):
                value = _VALUE.match(text, position)
                position = value.end() if value is not None else position
                kept.append(REDACTED)
    kept.append(text[position:])
    return "".join(kept)


def is_sensitive(name: str, names: frozenset[str] = SENSITIVE_PARAMS) -> bool:
    """True when parameter *name* (as sent, percent-encoded or not), folded, is one of *names*,
    or an array-style name with one of them as its base or a bracketed part."""
    decoded = unquote_plus(name)
    if fold_name(decoded) in names:
        return True
    if "[" not in decoded and "]" not in decoded:
        return False
    return any(fold_name(part) in names for part in _NAME_PARTS.split(decoded))


def _redact_reference(url: str, names: frozenset[str], *, absolute: bool) -> str:
    # Split by hand rather than with urlsplit: it raises on a malformed host ("http://[::1/")
    # and drops tabs and newlines, while the text kept must be the text sent.
    head = url.partition("#")[0]
    head, mark, query = head.partition("?")
    start = head.find("//") if absolute else (0 if head.startswith("//") else -1)
    if start >= 0 and (not absolute or head[:start].endswith(":")):
        start += 2
        end = head.find("/", start)
        if end < 0:
            end = len(head)
        authority = head[start:end].rpartition("@")[2]
        head = head[:start] + authority + _redact_path(head[end:], names)
    else:
        head = _redact_path(head, names)
    if query:
        # A URL inside a value (``?next=https://user:pass@idp/cb``) loses its login too.
        query = _USERINFO.sub(r"\g<scheme>", _redact_query(query, names))
    return head + mark + query


def _redact_path(path: str, names: frozenset[str]) -> str:
    if ";" not in path:
        return path
    segments = path.split("/")
    for index, segment in enumerate(segments):
        if ";" in segment:
            first, *params = segment.split(";")
            segments[index] = ";".join([first, *(_redact_pair(p, names) for p in params)])
    return "/".join(segments)


def _redact_query(query: str, names: frozenset[str]) -> str:
    pieces = _PAIRS.split(query)
    pieces[::2] = [_redact_pair(pair, names) for pair in pieces[::2]]
    return "".join(pieces)


def _redact_pair(pair: str, names: frozenset[str]) -> str:
    name = pair.partition("=")[0]
    if pair and is_sensitive(name, names):
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
    # One of *names*, whitespace around it and case aside, standing between separators of
    # parameters ('&', ';', the query's ends) or of array-style name parts ('[', ']'): for
    # ASCII text never false when is_sensitive would hold for some parameter, in one search.
    trie: dict[str, dict[str, Any]] = {}
    for name in names:
        node = trie
        for char in fold_name(name):
            node = node.setdefault(char, {})
        node[""] = {}
    return re.compile(rf"(?:^|[&;\[\]])\s*{_alternation(trie)}\s*(?:[=&;\[\]]|$)", re.IGNORECASE)


# A folded name's '_' stands for '-' as well.
_CHAR = {"_": "[-_]"}


def _alternation(trie: dict[str, Any]) -> str:
    # The names with shared prefixes factored out (a(?:pi(?:_key|key)|uth)...): after each
    # separator the search tries a few letters instead of all 47 names one after another.
    branches = [
        _CHAR.get(char, re.escape(char)) + _alternation(rest)
        for char, rest in sorted(trie.items())
        if char
    ]
    if "" in trie:  # a name ends here; backtracking still tries the longer ones first
        return f"(?:{'|'.join(branches)})?" if branches else ""
    return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"


# In free text: an absolute URL (scheme://...); a path-and-query as urllib3 writes it after
# "url: ", starting a word; or the name and '=' of a pair. A URL runs to whitespace or a
# quote: a bracket or a comma may belong to a secret value, and cutting there would leave the
# rest of the secret in view.
_IN_TEXT = re.compile(
    r"""(?P<absolute>[A-Za-z][A-Za-z0-9+.\-]*://[^\s'"<>`]*)"""
    r"""|(?:^|(?<=[\s'"(=]))(?P<relative>/[^\s'"<>`]*)"""
    r"""|(?P<name>[^\s&;?#=/'"<>:,(){}`]+)\s*=\s*"""
)
# The value of a pair in free text: quoted, or up to a parameter separator, whitespace or a
# quote.
_VALUE = re.compile(r"""'[^']*'|"[^"]*"|[^\s&;'"<>`]*""")
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#@\s]*@")
