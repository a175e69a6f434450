"""Configuration: the frozen policy models, loading from YAML or a dict, and host matching.

The models are msgspec Structs: the same classes validate input, give the error path, produce
the JSON Schema shipped in docs/, and are the frozen values the pipeline reads.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, TypeAlias

import msgspec
import yaml

from .errors import ConfigError

ENV_VAR: Final = "RESILIENT_SESSION_CONFIG"

Seconds: TypeAlias = Annotated[float, msgspec.Meta(gt=0)]
Status: TypeAlias = Annotated[int, msgspec.Meta(ge=100, le=599)]


class _Model(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every config section: frozen, and an unknown key is an error."""


class RetryPolicy(_Model, frozen=True):
    """How many tries a call gets, how long to wait between them, and what is retried."""

    max_attempts: Annotated[int, msgspec.Meta(ge=1)] = 4
    backoff_base: Seconds = 0.5
    backoff_cap: Seconds = 8.0
    retry_after_cap: Annotated[float, msgspec.Meta(ge=0)] = 30.0
    transient_statuses: frozenset[Status] = frozenset({408, 425, 500, 502, 504})
    overload_statuses: frozenset[Status] = frozenset({429, 503})

    def __post_init__(self) -> None:
        if self.backoff_cap < self.backoff_base:
            raise ValueError(
                f"backoff_cap: must be >= backoff_base ({self.backoff_base}), "
                f"got {self.backoff_cap}"
            )
        both = self.transient_statuses & self.overload_statuses
        if both:
            raise ValueError(f"overload_statuses: {sorted(both)} also listed in transient_statuses")


class BudgetPolicy(_Model, frozen=True):
    """The per-host token bucket that bounds retries to a share of first tries."""

    ratio: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.2
    min_per_second: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    max_tokens: Annotated[float, msgspec.Meta(ge=1)] = 10.0


class BreakerPolicy(_Model, frozen=True):
    """The per-host circuit breaker."""

    failure_threshold: Annotated[int, msgspec.Meta(ge=1)] = 5
    recovery_timeout: Seconds = 5.0
    recovery_timeout_max: Seconds = 60.0
    half_open_max_calls: Annotated[int, msgspec.Meta(ge=1)] = 1
    window: Annotated[int, msgspec.Meta(ge=1)] | None = None
    failure_rate_threshold: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.5
    minimum_calls: Annotated[int, msgspec.Meta(ge=1)] = 10

    def __post_init__(self) -> None:
        if self.recovery_timeout_max < self.recovery_timeout:
            raise ValueError(
                f"recovery_timeout_max: must be >= recovery_timeout ({self.recovery_timeout}), "
                f"got {self.recovery_timeout_max}"
            )


class DeadlinePolicy(_Model, frozen=True):
    """The default deadline of a call and the header that carries what remains of it."""

    default: Seconds | None = None
    header: Annotated[str, msgspec.Meta(min_length=1)] | None = "X-Request-Timeout-Ms"


class TimeoutPolicy(_Model, frozen=True):
    """Per-try timeouts used when the caller gives none."""

    connect: Seconds = 5.0
    read: Seconds = 30.0


class HostPolicy(_Model, frozen=True):
    """Everything that applies to one host, after merging its entry over the defaults."""

    retry: RetryPolicy = RetryPolicy()
    budget: BudgetPolicy = BudgetPolicy()
    breaker: BreakerPolicy = BreakerPolicy()
    deadline: DeadlinePolicy = DeadlinePolicy()
    timeout: TimeoutPolicy = TimeoutPolicy()


class RegistryPolicy(_Model, frozen=True):
    """Bounds on per-host state kept by a session."""

    max_hosts: Annotated[int, msgspec.Meta(ge=1)] = 10_000


class EventsPolicy(_Model, frozen=True):
    """What the ``http.try`` events hide."""

    redact_params: frozenset[Annotated[str, msgspec.Meta(min_length=1)]] = frozenset()


class ConfigDocument(_Model, frozen=True):
    """The shape of a configuration file; used for the JSON Schema and top-level keys."""

    defaults: HostPolicy = HostPolicy()
    hosts: dict[str, HostPolicy] = {}
    registry: RegistryPolicy = RegistryPolicy()
    events: EventsPolicy = EventsPolicy()


class _RawDocument(_Model, frozen=True):
    """First pass: top-level keys known, host entries kept raw so they can be merged."""

    defaults: dict[str, Any] = {}
    hosts: dict[str, Any] = {}
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

    def host_patterns(self) -> list[str]:
        return [rule.pattern for rule in self.rules]


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
        raise ConfigError(f"{path}: not valid YAML: {_one_line(str(exc))}") from None
    if data is None:
        raise ConfigError(f"{path}: config file is empty")
    return data


def _build(data: Any, origin: str) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config must be a mapping with defaults:/hosts:, got {type(data).__name__}"
        )
    raw = _convert(data, _RawDocument, ())
    defaults = _convert(raw.defaults, HostPolicy, ("defaults",))
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
            f"{_dotted(path)}: expected a mapping of sections (retry, budget, ...), "
            f"got {type(entry).__name__} {entry!r}"
        )
    merged = dict(base)
    for section, values in entry.items():
        if isinstance(values, Mapping) and isinstance(base.get(section), dict):
            merged[section] = {**base[section], **values}
        else:
            merged[section] = values
    policy = _convert(merged, HostPolicy, path)
    wildcard = any(ch in host for ch in "*?[")
    return _HostRule(pattern=str(pattern), host=host, port=port, wildcard=wildcard, policy=policy)


def _parse_pattern(pattern: Any, path: tuple[str, ...]) -> tuple[str, int | None]:
    where = _dotted(path)
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


def _convert(data: Any, model: type[Any], prefix: tuple[str, ...]) -> Any:
    try:
        return msgspec.convert(data, model)
    except msgspec.ValidationError as exc:
        raise ConfigError(_describe(str(exc), prefix, data)) from None


_AT = re.compile(r"^(?P<msg>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)
_UNKNOWN = re.compile(r"unknown field `(?P<key>[^`]+)`")
_NAMED = re.compile(r"^(?P<key>[a-z_]+): (?P<msg>.*)$", re.DOTALL)


def _describe(message: str, prefix: tuple[str, ...], data: Any) -> str:
    """Turn msgspec's message into ``dotted.key.path: what is wrong, got VALUE``."""
    at = _AT.match(message)
    msg, keys = (at.group("msg"), _split_path(at.group("path"))) if at else (message, [])
    unknown = _UNKNOWN.search(msg)
    named = _NAMED.match(msg)
    if unknown:
        keys.append(unknown.group("key"))
        return f"{_dotted((*prefix, *keys))}: unknown key"
    if named:
        # A relation between two keys, raised by a model's __post_init__: name the second key.
        keys.append(named.group("key"))
        return f"{_dotted((*prefix, *keys))}: {named.group('msg')}"
    value = _lookup(data, keys)
    if value is _MISSING:
        shown = ""
    elif "got" in msg:
        shown = f" {value!r}"
    else:
        shown = f", got {value!r}"
    return f"{_dotted((*prefix, *keys))}: {_plain(msg)}{shown}"


def _split_path(path: str) -> list[str]:
    # msgspec writes `$.a.b[3]`; list positions are kept as "[3]".
    return [name or f"[{index}]" for name, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path)]


_MISSING: Final = object()


def _lookup(data: Any, keys: list[str]) -> Any:
    for key in keys:
        index = key[1:-1]
        if isinstance(data, Mapping) and key in data:
            data = data[key]
        elif isinstance(data, list) and index.isdigit() and int(index) < len(data):
            data = data[int(index)]
        else:
            return _MISSING
    return data


def _plain(message: str) -> str:
    text = message.replace("`", "")
    return text[:1].lower() + text[1:]


def _dotted(keys: tuple[str, ...] | list[str]) -> str:
    text = ""
    for key in keys:
        if re.fullmatch(r"\[\d+\]", key):
            text += key
        else:
            name = key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else f'"{key}"'
            text += f".{name}" if text else name
    return text or "<config>"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def schema() -> dict[str, Any]:
    """The JSON Schema of a configuration file, generated from the models."""
    result: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "resilient-session configuration",
        **msgspec.json.schema(ConfigDocument),
    }
    return result
