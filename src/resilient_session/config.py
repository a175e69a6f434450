"""Configuration: loading from YAML or a dict, per-host rules, and host matching."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec
import yaml

from .errors import ConfigError
from .policy import ConfigDocument, EventsPolicy, HostPolicy, RegistryPolicy, StrictStruct
from .validation import convert, dotted, one_line

ENV_VAR: Final = "RESILIENT_SESSION_CONFIG"


class _RawDocument(StrictStruct, frozen=True):
    """First pass: top-level keys known, host entries kept raw so they can be merged."""

    defaults: dict[str, Any] = msgspec.field(default_factory=dict)
    hosts: dict[str, Any] = msgspec.field(default_factory=dict)
    registry: RegistryPolicy = RegistryPolicy()
    events: EventsPolicy = EventsPolicy()


_PORT_SUFFIX = re.compile(r":(\d+)$")
_PATTERN_CHARS = re.compile(r"^[A-Za-z0-9.*?\-_\[\]!:]+$")


class _HostRule(msgspec.Struct, frozen=True):
    pattern: str
    host: str
    port: int | None
    wildcard: bool
    policy: HostPolicy

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
    source: str = "built-in defaults"

    def for_host(self, host: str, port: int) -> HostPolicy:
        """The policy for *host* (lower case, IPv6 without brackets) on *port*."""
        rule = self._match(host, port)
        return rule.policy if rule is not None else self.defaults

    def matching_pattern(self, host: str, port: int) -> str | None:
        """The ``hosts:`` key that applies to *host* on *port*, or None for the defaults."""
        rule = self._match(host, port)
        return rule.pattern if rule is not None else None

    def _match(self, host: str, port: int) -> _HostRule | None:
        host = host.lower()
        return next((rule for rule in self.rules if rule.matches(host, port)), None)


def load(source: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None) -> Config:
    """Load and validate a configuration.

    Args:
        source: a ``Config`` (returned as is), a mapping as YAML would give, a path to a YAML
            file, or None: the file named by ``RESILIENT_SESSION_CONFIG`` when set, else the
            built-in defaults.

    Raises:
        ConfigError: naming the dotted key path and the bad value.
    """
    if isinstance(source, Config):
        return source
    if source is None:
        env_path = os.environ.get(ENV_VAR)
        if not env_path:
            return Config()
        source = env_path
    if isinstance(source, Mapping):
        return _build(source, "<dict>")
    try:
        return _build(_read_yaml(Path(source)), str(source))
    except ConfigError as exc:
        message = str(exc)
        if message.startswith(f"{source}:"):
            raise
        raise ConfigError(f"{source}: {message}") from None


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{path}: cannot read config file: {reason}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None)
        if mark is not None and problem:
            where = f"{path}:{mark.line + 1}:{mark.column + 1}"
            raise ConfigError(f"{where}: not valid YAML: {problem}") from None
        raise ConfigError(f"{path}: not valid YAML: {one_line(str(exc))}") from None
    if data is None:
        raise ConfigError(f"{path}: config file is empty")
    return data


def _build(data: Any, origin: str) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config must be a mapping with defaults:/hosts:, got {type(data).__name__}"
        )
    raw = convert(data, _RawDocument, ())
    defaults = convert(raw.defaults, HostPolicy, ("defaults",))
    base = msgspec.to_builtins(defaults)
    rules = [_rule(pattern, entry, base) for pattern, entry in raw.hosts.items()]
    rules.sort(key=_HostRule.specificity)
    return Config(
        defaults=defaults,
        rules=tuple(rules),
        registry=raw.registry,
        events=raw.events,
        source=origin,
    )


def _rule(pattern: Any, entry: Any, base: dict[str, Any]) -> _HostRule:
    path = ("hosts", str(pattern))
    host, port = _parse_pattern(pattern, path)
    if not isinstance(entry, Mapping):
        raise ConfigError(
            f"{dotted(path)}: expected a mapping of sections (retry, budget, ...), "
            f"got {type(entry).__name__} {entry!r}"
        )
    merged = dict(base)
    for section, values in entry.items():
        if isinstance(values, Mapping) and isinstance(base.get(section), dict):
            merged[section] = {**base[section], **values}
        else:
            merged[section] = values
    policy = convert(merged, HostPolicy, path)
    wildcard = any(ch in host for ch in "*?[")
    return _HostRule(pattern=str(pattern), host=host, port=port, wildcard=wildcard, policy=policy)


def _parse_pattern(pattern: Any, path: tuple[str, ...]) -> tuple[str, int | None]:
    where = dotted(path)
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"{where}: host pattern must be a non-empty string, got {pattern!r}")
    if not _PATTERN_CHARS.match(pattern):
        raise ConfigError(
            f"{where}: bad host pattern {pattern!r}: use a host, host:port or shell-style "
            "wildcards (*, ?, [...]), without scheme or path"
        )
    host, port = pattern.lower(), None
    bracketed = re.fullmatch(r"\[([0-9a-f:.]+)\](?::(\d+))?", host)
    if bracketed:
        host = bracketed.group(1)
        port = int(bracketed.group(2)) if bracketed.group(2) else None
    elif host.count(":") == 1:
        found = _PORT_SUFFIX.search(host)
        if not found:
            raise ConfigError(f"{where}: bad port in host pattern {pattern!r}")
        host, port = host[: found.start()], int(found.group(1))
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"{where}: port must be 1..65535, got {port}")
    if not host or host.count("[") != host.count("]"):
        raise ConfigError(f"{where}: bad host pattern {pattern!r}: unbalanced [ ]")
    return host, port


def schema() -> dict[str, Any]:
    """The JSON Schema of a configuration file, generated from the models."""
    result: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "resilient-session configuration",
        **msgspec.json.schema(ConfigDocument),
    }
    return result
