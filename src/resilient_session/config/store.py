"""The rules between the ``state:`` keys that name a Redis: a mode and the keys it reads, TLS
and its url. Each broken rule names its key (``state.sentinels: ...``); docs/fleet.md says
what each mode reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol
from urllib.parse import parse_qs

_TLS_DEFAULTS = (
    ("ssl_ca_certs", None),
    ("ssl_certfile", None),
    ("ssl_keyfile", None),
    ("ssl_cert_reqs", "required"),
    ("ssl_check_hostname", True),
)
_SENTINEL_KEYS = ("sentinels", "service_name", "sentinel_password")


class StateFields(Protocol):
    """The keys of ``state:`` these rules read (``policy.StatePolicy``)."""

    @property
    def url(self) -> str: ...
    @property
    def key_prefix(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def sentinels(self) -> Sequence[tuple[str, int]]: ...
    @property
    def service_name(self) -> str | None: ...
    @property
    def sentinel_password(self) -> str | None: ...
    @property
    def ssl_keyfile(self) -> str | None: ...
    @property
    def ssl_certfile(self) -> str | None: ...


def check_state(state: StateFields) -> None:
    """Raise ``ValueError("<key>: <what is wrong>")`` for the first rule *state* breaks.

    No message quotes the url: it may hold a password.
    """
    scheme = state.url.partition("://")[0]
    for name, default in _TLS_DEFAULTS:
        if getattr(state, name) != default and scheme != "rediss":
            raise ValueError(f"{name}: TLS needs a rediss:// url, got a {scheme}:// one")
    if state.ssl_keyfile is not None and state.ssl_certfile is None:
        raise ValueError("ssl_keyfile: needs ssl_certfile, the client certificate it belongs to")
    if state.mode != "sentinel":
        for name in _SENTINEL_KEYS:
            if getattr(state, name):
                raise ValueError(f"{name}: read only with mode: sentinel, got mode: {state.mode}")
    if state.mode != "single" and scheme == "unix":
        raise ValueError(
            f"url: mode {state.mode} needs a redis:// or rediss:// url, not a unix socket"
        )
    if state.mode == "cluster":
        _check_cluster(state)
    elif state.mode == "sentinel":
        if not state.sentinels:
            raise ValueError("sentinels: mode sentinel needs at least one [host, port]")
        if state.service_name is None:
            raise ValueError(
                "service_name: mode sentinel needs the name the sentinels know the master by"
            )


def _check_cluster(state: StateFields) -> None:
    if "{" in state.key_prefix or "}" in state.key_prefix:
        # A tag in the prefix would put every host's keys in one slot: the host's part of
        # each key is its hash tag.
        raise ValueError("key_prefix: may not hold { or } with mode: cluster")
    # After the userinfo's last '@', as redact_store_url cuts it: a password may hold a '/'.
    place = state.url.partition("://")[2].rpartition("@")[2]
    place, _, query = place.partition("?")
    path = place.partition("/")[2]
    databases = {path} | set(parse_qs(query).get("db", ()))
    if not databases <= {"", "0"}:
        raise ValueError("url: a Redis Cluster has database 0 only")
