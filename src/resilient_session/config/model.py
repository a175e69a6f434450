"""Configuration: loading from YAML or a dict, per-host rules, and host matching."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from resilient_session.errors import ConfigError

from . import file as configfile
from .document import ConfigDocument
from .hostname import canonical_host
from .policy import (
    EventsPolicy,
    HostPolicy,
    InboundPolicy,
    RegistryPolicy,
    StatePolicy,
)
from .route import MAX_ROUTE_LENGTH, MAX_ROUTES, ROUTE_KEY_PATTERN, Route, specificity
from .validation import Errors, check_key, check_struct, check_value, dotted, shown

ENV_VAR: Final = "RESILIENT_SESSION_CONFIG"


_PORT_SUFFIX = re.compile(r":(\d+)$")
_PATTERN_CHARS = re.compile(r"^[A-Za-z0-9.*?\-_\[\]!:]+$")
_ROUTE_CHARS = re.compile(ROUTE_KEY_PATTERN)


class _HostRule(msgspec.Struct, frozen=True):
    pattern: str
    host: str
    port: int | None
    wildcard: bool
    policy: HostPolicy
    # Longest pattern first (route.specificity): the order a call's path is tried in.
    routes: tuple[Route, ...] = ()

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            return fnmatch.fnmatchcase(host, self.host)
        return host == self.host

    def specificity(self) -> tuple[int, int, int]:
        # DESIGN: exact host:port, then exact host, then wildcards with the longest pattern first.
        if not self.wildcard:
            return (0 if self.port is not None else 1, 0, 0)
        return (2, -len(self.pattern), 0 if self.port is not None else 1)


class Config(msgspec.Struct, frozen=True):
    """A loaded, validated configuration.

    Build one with :func:`load`; ``for_host`` gives the merged policy of a host.
    """

    defaults: HostPolicy = HostPolicy()
    rules: tuple[_HostRule, ...] = ()
    registry: RegistryPolicy = RegistryPolicy()
    events: EventsPolicy = EventsPolicy()
    inbound: InboundPolicy = InboundPolicy()
    state: StatePolicy = StatePolicy()
    source: str = "built-in defaults"

    def for_host(self, host: str, port: int) -> HostPolicy:
        """The policy for *host* (IPv6 without brackets; matched on its canonical spelling,
        ``hostname.canonical_host``) on *port*."""
        rule = self._match(host, port)
        return rule.policy if rule is not None else self.defaults

    def routes_for(self, host: str, port: int) -> tuple[Route, ...]:
        """The routes of the ``hosts:`` entry that applies to *host* on *port*, in the order a
        path is tried against them (longest pattern first); empty for a host without any."""
        rule = self._match(host, port)
        return rule.routes if rule is not None else ()

    @property
    def routed(self) -> bool:
        """Whether any ``hosts:`` entry has routes: without, no call looks at its path."""
        return any(rule.routes for rule in self.rules)

    def policies(self) -> Iterator[HostPolicy]:
        """Every policy a call may run under: the defaults, each host entry's, each route's."""
        yield self.defaults
        for rule in self.rules:
            yield rule.policy
            for route in rule.routes:
                yield route.policy

    def matching_pattern(self, host: str, port: int) -> str | None:
        """The ``hosts:`` key that applies to *host* on *port*, or None for the defaults."""
        rule = self._match(host, port)
        return rule.pattern if rule is not None else None

    def _match(self, host: str, port: int) -> _HostRule | None:
        host = canonical_host(host)
        return next((rule for rule in self.rules if rule.matches(host, port)), None)


def load(source: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None) -> Config:
    """Load and validate a configuration.

    Args:
        source: a ``Config`` (returned as is), a mapping as YAML would give, a path to a YAML
            file (a regular file of at most 1 MiB), or None: the file named by
            ``RESILIENT_SESSION_CONFIG`` when set, else the built-in defaults.

    Raises:
        ConfigError: naming every error found, each with its dotted key path and bad value.
    """
    if isinstance(source, Config):
        return source
    if source is None:
        env_path = os.environ.get(ENV_VAR)
        if not env_path:
            return Config()
        source = env_path
    if isinstance(source, Mapping):
        return _build(source, "<dict>", Errors())
    errors = Errors()
    data = configfile.read(Path(source), errors)
    try:
        return _build(data, str(source), errors)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _build(data: Any, origin: str, errors: Errors) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config must be a mapping with defaults:/hosts:, got {type(data).__name__}"
        )
    for key in data:
        check_key(key, _TOP_LEVEL, (), errors)
    try:
        defaults = check_struct(_defaults(data, errors), HostPolicy, ("defaults",), errors)
        registry = check_struct(data.get("registry", {}), RegistryPolicy, ("registry",), errors)
        events = check_struct(data.get("events", {}), EventsPolicy, ("events",), errors)
        inbound = check_struct(data.get("inbound", {}), InboundPolicy, ("inbound",), errors)
        state = check_struct(data.get("state", {}), StatePolicy, ("state",), errors)
        rules = _rules(data.get("hosts", {}), defaults, errors)
    except RecursionError:
        raise ConfigError("config nests too deeply") from None
    errors.raise_if_any()
    # No error was found, so every section converted.
    assert defaults is not None  # noqa: S101
    assert registry is not None  # noqa: S101
    assert events is not None  # noqa: S101
    assert inbound is not None  # noqa: S101
    assert state is not None  # noqa: S101
    rules.sort(key=_HostRule.specificity)
    return Config(
        defaults=defaults,
        rules=tuple(rules),
        registry=registry,
        events=events,
        inbound=inbound,
        state=state,
        source=origin,
    )


def _defaults(data: Mapping[str, Any], errors: Errors) -> Any:
    """The ``defaults:`` section, a ``routes:`` key taken out of it with its own error: a
    route is a part of one host, and the nearest section name would only mislead."""
    defaults = data.get("defaults", {})
    if isinstance(defaults, Mapping) and _ROUTES in defaults:
        errors.add(
            ("defaults", _ROUTES),
            'routes belong under a host entry: hosts."HOST".routes."/path/*"',
        )
        defaults = {key: value for key, value in defaults.items() if key != _ROUTES}
    return defaults


_TOP_LEVEL: Final = tuple(field.name for field in msgspec.structs.fields(ConfigDocument))


def _rules(hosts: Any, defaults: HostPolicy | None, errors: Errors) -> list[_HostRule]:
    if not isinstance(hosts, Mapping):
        check_value(hosts, dict[str, Any], ("hosts",), errors)
        return []
    # A host entry is merged over the defaults; over the built-in ones when the defaults are
    # in error, so its own keys are still checked.
    base = msgspec.to_builtins(defaults if defaults is not None else HostPolicy())
    rules: list[_HostRule] = []
    seen: dict[tuple[str, int | None], str] = {}
    for pattern, entry in hosts.items():
        if not isinstance(pattern, str):
            errors.add(
                ("hosts",),
                f"a host pattern must be a string, got {type(pattern).__name__} {shown(pattern)}",
            )
            continue
        path = ("hosts", pattern)
        parsed = _parse_pattern(pattern, path, errors)
        if parsed is not None:
            earlier = seen.setdefault(parsed, pattern)
            if earlier != pattern:
                errors.add(path, f"names the same host as {dotted(('hosts', earlier))}")
        rule = _rule(pattern, parsed, entry, base, errors)
        if rule is not None:
            rules.append(rule)
    return rules


def _rule(
    pattern: str,
    parsed: tuple[str, int | None] | None,
    entry: Any,
    base: dict[str, Any],
    errors: Errors,
) -> _HostRule | None:
    path = ("hosts", pattern)
    if not isinstance(entry, Mapping):
        errors.add(
            path,
            f"expected a mapping of sections (retry, budget, ...) and routes, "
            f"got {type(entry).__name__} {shown(entry)}",
        )
        return None
    sections = {key: value for key, value in entry.items() if key != _ROUTES}
    before = len(errors)
    check_struct(sections, HostPolicy, path, errors, relations=False)
    merged = merge_over(base, sections)
    policy = None
    if len(errors) == before and parsed is not None:
        policy = check_struct(merged, HostPolicy, path, errors)
    # A route is merged over its host's entry only when that is sound; else only the route's
    # own keys are checked, so no error of the host's is reported again for each route.
    routes = _routes(entry.get(_ROUTES, {}), merged if policy is not None else None, path, errors)
    if policy is None or parsed is None or len(errors) > before:
        return None
    host, port = parsed
    wildcard = any(ch in host for ch in "*?[")
    return _HostRule(
        pattern=pattern, host=host, port=port, wildcard=wildcard, policy=policy, routes=routes
    )


_ROUTES: Final = "routes"


def merge_over(base: dict[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """*entry*'s sections over *base*, key by key within each section and each section nested
    in one (``fallback.stale``)."""
    merged = dict(base)
    for key, value in entry.items():
        below = base.get(key)
        if isinstance(value, Mapping) and isinstance(below, dict):
            merged[key] = merge_over(below, value)
        else:
            merged[key] = value
    return merged


def _routes(
    routes: Any, host: dict[str, Any] | None, path: tuple[str, ...], errors: Errors
) -> tuple[Route, ...]:
    """A host entry's ``routes:``, each merged over *host* (the entry merged over the
    defaults; None when that is in error: each route's own keys are checked, no more),
    longest pattern first."""
    path = (*path, _ROUTES)
    if not isinstance(routes, Mapping):
        errors.add(
            path,
            f"expected a mapping of path patterns to sections, "
            f"got {type(routes).__name__} {shown(routes)}",
        )
        return ()
    if len(routes) > MAX_ROUTES:
        errors.add(path, f"at most {MAX_ROUTES} routes a host, got {len(routes)}")
        return ()
    found: list[Route] = []
    for pattern, entry in routes.items():
        if not _route_pattern_ok(pattern, path, errors):
            continue
        where = (*path, pattern)
        if not isinstance(entry, Mapping):
            errors.add(
                where,
                f"expected a mapping of sections (retry, budget, ...), "
                f"got {type(entry).__name__} {shown(entry)}",
            )
            continue
        before = len(errors)
        check_struct(entry, HostPolicy, where, errors, relations=False)
        if len(errors) > before or host is None:
            continue
        policy = check_struct(merge_over(host, entry), HostPolicy, where, errors)
        if policy is not None:
            found.append(Route(pattern, policy))
    return tuple(sorted(found, key=specificity))


def _route_pattern_ok(pattern: Any, path: tuple[str, ...], errors: Errors) -> bool:
    if not isinstance(pattern, str):
        errors.add(
            path,
            f"a route pattern must be a string, got {type(pattern).__name__} {shown(pattern)}",
        )
        return False
    if len(pattern) > MAX_ROUTE_LENGTH:
        errors.add((*path, pattern), f"a route pattern is at most {MAX_ROUTE_LENGTH} characters")
        return False
    if not _ROUTE_CHARS.match(pattern):
        errors.add(
            (*path, pattern),
            "bad route pattern: a path from its leading /, with shell-style wildcards "
            "(*, ?, [...]), no scheme, host, query or spaces",
        )
        return False
    return True


def _parse_pattern(
    pattern: str, path: tuple[str, ...], errors: Errors
) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``hosts:`` key, or None after adding its error to *errors*."""
    if not pattern:
        errors.add(path, "host pattern must be a non-empty string")
        return None
    if not _PATTERN_CHARS.match(pattern):
        errors.add(
            path,
            "bad host pattern: use a host, host:port or shell-style wildcards (*, ?, [...]), "
            "without scheme or path",
        )
        return None
    host, port = pattern.lower(), None
    bracketed = re.fullmatch(r"\[([0-9a-f:.]+)\](?::(\d+))?", host)
    if bracketed:
        host = bracketed.group(1)
        port = int(bracketed.group(2)) if bracketed.group(2) else None
    elif host.count(":") == 1:
        found = _PORT_SUFFIX.search(host)
        if not found:
            errors.add(path, "bad port in host pattern")
            return None
        host, port = host[: found.start()], int(found.group(1))
    if port is not None and not 1 <= port <= 65535:
        errors.add(path, f"port must be 1..65535, got {shown(port)}")
        return None
    if not host or host.count("[") != host.count("]"):
        errors.add(path, "bad host pattern: unbalanced [ ]")
        return None
    # Matched on the host's canonical spelling, so a rule written "127.1" or "Api.test." is
    # the rule of 127.0.0.1 or api.test, whichever way a URL spells them.
    if any(ch in host for ch in "*?["):
        return host.rstrip(".") or host, port
    return canonical_host(host), port
