"""The shape of a configuration file as a whole, and the JSON Schema generated from it.

The schema is what editors check a file against; loading checks more (``SCHEMA_DESCRIPTION``).
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Final, TypeAlias

import msgspec

from .policy import (
    EventsPolicy,
    HostPolicy,
    InboundPolicy,
    RegistryPolicy,
    StatePolicy,
    StrictStruct,
)
from .route import MAX_ROUTES, RouteKey

# A port 1..65535, leading zeros allowed as loading allows them.
_PORT: Final = (
    r"0*(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
)
_HOST_CHARS: Final = r"A-Za-z0-9.*?\-_\[\]!"
# A key of hosts: as loading reads it: [ipv6] with an optional port; a host or wildcard with an
# optional port; or a bare IPv6 address or wildcard (two colons or more, no port, and not
# [ipv6]:digits, whose port loading reads). Never a scheme or a path. Written for JSON Schema's
# regex dialect too, which editors run.
HOST_KEY_PATTERN: Final = (
    rf"^(?:\[[0-9A-Fa-f:.]+\](?::{_PORT})?"
    rf"|[{_HOST_CHARS}]+(?::{_PORT})?"
    rf"|(?!\[[0-9A-Fa-f:.]+\]:[0-9]+$)[{_HOST_CHARS}:]*:[{_HOST_CHARS}:]*:[{_HOST_CHARS}:]*)$"
)

HostKey: TypeAlias = Annotated[str, msgspec.Meta(min_length=1, pattern=HOST_KEY_PATTERN)]


class HostEntry(HostPolicy, frozen=True):
    """A ``hosts:`` entry: sections over the defaults, and the host's routes (a path pattern
    each, its sections over the host's), each with state of its own."""

    routes: Annotated[dict[RouteKey, HostPolicy], msgspec.Meta(max_length=MAX_ROUTES)] = {}  # noqa: RUF012 - a msgspec Struct copies it


class ConfigDocument(StrictStruct, frozen=True):
    """The shape of a configuration file; used for the JSON Schema and top-level keys."""

    defaults: HostPolicy = HostPolicy()
    # Loading reads the keys itself, with its own messages; the pattern is the schema's.
    hosts: dict[HostKey, HostEntry] = {}  # noqa: RUF012 - a msgspec Struct copies it
    registry: RegistryPolicy = RegistryPolicy()
    events: EventsPolicy = EventsPolicy()
    inbound: InboundPolicy = InboundPolicy()

    state: StatePolicy = StatePolicy()


def schema() -> dict[str, Any]:
    """The JSON Schema of a configuration file, generated from the models."""
    result: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "resilient-session configuration",
        "description": SCHEMA_DESCRIPTION,
        **msgspec.json.schema(ConfigDocument),
    }
    sets = {
        name
        for model in result["$defs"].values()
        for name, field in model.get("properties", {}).items()
        if field.get("uniqueItems") is True
    }
    _settle(result, sets)
    return result


def _settle(node: Any, sets: set[str]) -> None:
    """The same schema from every install: docstrings dedented (as msgspec 0.23 and Python
    3.13's compiler do; earlier ones keep the indent), and each set in sorted order wherever a
    default holds one, not in the order its hash table happens to hold, which differs between a
    module compiled from source and one loaded from a .pyc."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = inspect.cleandoc(value)
            elif isinstance(value, list) and (
                key in sets or (key == "default" and node.get("uniqueItems"))
            ):
                node[key] = sorted(value)
            else:
                _settle(value, sets)
    elif isinstance(node, list):
        for value in node:
            _settle(value, sets)


# What an editor is told the schema leaves out: docs/configuration.md lists the same rules.
SCHEMA_DESCRIPTION: Final = (
    "Checks every key, type and range, the form of each hosts key (a host, host:port, "
    "[ipv6]:port or wildcard, no scheme or path, a port 1..65535) and of each routes key (a "
    "path from its /, shell-style wildcards allowed). Partial: only loading the file "
    "(resilient-session check) enforces the rules between keys (retry.backoff_cap >= "
    "backoff_base; transient_statuses and overload_statuses disjoint; "
    "breaker.recovery_timeout_max >= recovery_timeout; limit.min <= initial <= max; "
    "fallback.stale.max_entry_bytes <= max_bytes; "
    "deadline.header and attempt_header not a framing, hop-by-hop or credential header and not "
    "the same), each again on a host entry merged over defaults and on a route merged over its "
    "host's; balanced [ ] in a hosts key; two hosts keys naming one host; a state.url the "
    "Redis client accepts; and the file's own limits (duplicate keys, aliases, size and depth)."
)
