"""The names of a host's keys: ``key_prefix`` + the host key + a suffix, and in a Redis Cluster
the host key as a hash tag, so the sync script's keys of one host share one slot.

A cluster hashes only the part of a key between its first ``{`` and the first ``}`` after it
(the hash tag). A host key is written by whoever chose the URL: ``{``, ``}`` or ``%`` in it are
percent-encoded, so no host key closes its tag early or opens another, no two host keys share
a tag, and the tag is never empty (an empty one hashes the whole key, suffix included).
"""

from __future__ import annotations

from typing import Final, TypeAlias

HostKeys: TypeAlias = tuple[str, str, str, str]

SUFFIXES: Final = (":breaker", ":budget", ":throttle", ":workers")
_ESCAPES: Final = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})


def host_keys(prefix: str, host: str, *, tagged: bool = False) -> HostKeys:
    """The breaker, budget, throttle and workers keys of *host*, in the script's KEYS order;
    *tagged* (``mode: cluster``) writes the host key as a hash tag."""
    base = prefix + (hash_tag(host) if tagged else host)
    breaker, budget, throttle, workers = (base + suffix for suffix in SUFFIXES)
    return breaker, budget, throttle, workers


def hash_tag(host: str) -> str:
    """``{`` + *host* with ``%``, ``{`` and ``}`` percent-encoded + ``}``; a lone ``%`` for an
    empty host, which no encoded host can be (each ``%`` of one comes with two hex digits)."""
    return "{" + (host.translate(_ESCAPES) or "%") + "}"
