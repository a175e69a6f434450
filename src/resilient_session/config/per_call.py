"""Per-call settings: ``resilience={...}`` on a call and ``with settings(...)``, validated as
the config is, and the host's policy with them over it.

Only the sections that concern one call may be set: ``retry``, ``timeout``, ``deadline``,
``hedging`` and ``fallback``. The per-host state (``breaker``, ``budget``, ``throttle``,
``limit``, ``state``) is shared by every call to the host, so one call cannot change it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import msgspec

from resilient_session.errors import ConfigError

from .model import merge_over
from .policy import HostPolicy
from .validation import Errors, Path, check_key, check_struct, check_value, shown

PER_CALL_SECTIONS: Final = ("retry", "timeout", "deadline", "hedging", "fallback")
PER_HOST_SECTIONS: Final = ("breaker", "budget", "throttle", "limit", "state")

# What the key paths of a call's own ``resilience=`` and of ``settings()`` start with.
CALL_ORIGIN: Final = "resilience"
SCOPE_ORIGIN: Final = "settings"

# A program that builds its settings anew for each call repeats a handful of them; past this
# many the caches start again rather than grow with the callers' variety.
_CACHE_SIZE: Final = 1024

_FIELDS: Final = {field.name: field.type for field in msgspec.structs.fields(HostPolicy)}


class Overrides:
    """Validated per-call settings: a section's keys over the host's, key by key.

    Equal settings compare and hash equal, whoever built them, so a policy with them over it
    is worked out once (:func:`effective_policy`).
    """

    __slots__ = ("_hash", "_key", "sections")

    def __init__(self, sections: dict[str, Any]) -> None:
        # Section -> key -> value as msgspec converted it (a frozenset, a float, ...), with a
        # nested section (fallback.stale) a dict of its own: immutable values, merged by key.
        self.sections = sections
        self._key = _frozen(sections)
        self._hash = hash(self._key)

    def over(self, outer: Overrides | None) -> Overrides:
        """These settings over *outer*'s: where both set a key, this one's wins."""
        if outer is None or outer is self:
            return self
        return _combined(outer, self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Overrides):
            return NotImplemented
        return self is other or self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Overrides({self.sections!r})"


def overrides_from(data: Any, origin: str = CALL_ORIGIN) -> Overrides | None:
    """*data* (``{"retry": {"max_attempts": 1}, ...}``) as validated settings; None for None
    or no section, so a call without them tests one ``is None``.

    Raises:
        ConfigError: a per-host section, an unknown key or a bad value, named by its path
            (``resilience.retry.max_atempts: unknown key (did you mean max_attempts?)``).
    """
    if data is None:
        return None
    try:
        key: Any = (origin, _frozen(data))
        known = _VALIDATED.get(key)
    except (TypeError, RecursionError):  # a value no dict can hold: validation names it
        key, known = None, None
    if known is not None:
        return known
    found = _validated(data, origin)
    if key is not None and found is not None:
        _remember(_VALIDATED, key, found)
    return found


def effective_policy(policy: HostPolicy, overrides: Overrides) -> HostPolicy:
    """*policy* with *overrides* over it; worked out once for each pair.

    Raises:
        ConfigError: the settings break a rule between two keys of *policy*
            (``resilience.retry.backoff_cap: must be >= backoff_base (2.0), got 1.0``).
    """
    # Keyed by the policy's identity, not its value: hashing a HostPolicy walks every section.
    # The entry holds the policy, so its id cannot be reused while the entry is kept.
    key = (id(policy), overrides)
    known = _EFFECTIVE.get(key)
    if known is not None and known[0] is policy:
        return known[1]
    merged = merge_over(msgspec.to_builtins(policy), overrides.sections)
    errors = Errors()
    effective = check_struct(merged, HostPolicy, (CALL_ORIGIN,), errors)
    errors.raise_if_any()
    assert effective is not None  # noqa: S101 - no error, so it converted
    _remember(_EFFECTIVE, key, (policy, effective))
    return effective


_SETTINGS: contextvars.ContextVar[Overrides | None] = contextvars.ContextVar(
    "resilient_session_settings", default=None
)

#: The settings of the enclosing ``settings()`` blocks, or None outside any: the contextvar's
#: own getter, as a call reads it once at its start.
current_overrides: Callable[[], Overrides | None] = _SETTINGS.get


def enter_call(data: Any) -> contextvars.Token[Overrides | None]:
    """Put a call's own ``resilience=`` *data* in force, over any ``settings()`` block, until
    ``leave(token)``.

    Raises:
        ConfigError: as :func:`overrides_from`, before anything is sent.
    """
    own = overrides_from(data, CALL_ORIGIN)
    outer = _SETTINGS.get()
    return _SETTINGS.set(outer if own is None else own.over(outer))


leave: Callable[[contextvars.Token[Overrides | None]], None] = _SETTINGS.reset


@contextmanager
def settings(**sections: Any) -> Iterator[Overrides | None]:
    """Per-call settings for every call made inside the block.

    Blocks nest: an inner block's keys win over an outer's key by key, and a call's own
    ``resilience=`` over both. The settings live in a contextvar, so each asyncio task keeps
    its own; a new thread starts without them unless run in a copy of the context
    (``contextvars.copy_context().run``).

    Args:
        **sections: ``retry``, ``timeout``, ``deadline``, ``hedging`` or ``fallback``, each a
            mapping of that section's keys as in the config.

    Yields:
        The settings in force inside the block.

    Raises:
        ConfigError: a per-host section, an unknown key or a bad value, named by its path
            (``settings.breaker: ...``), when the block is entered.

    Example::

        with resilient_session.settings(retry={"max_attempts": 1}):
            session.get(url)  # one try, whatever the host's retry.max_attempts
    """
    own = overrides_from(sections, SCOPE_ORIGIN)
    outer = _SETTINGS.get()
    inside = outer if own is None else own.over(outer)
    token = _SETTINGS.set(inside)
    try:
        yield inside
    finally:
        _SETTINGS.reset(token)


def _validated(data: Any, origin: str) -> Overrides | None:
    path: Path = (origin,)
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{origin}: expected a mapping of sections ({', '.join(PER_CALL_SECTIONS)}), "
            f"got {type(data).__name__} {shown(data)}"
        )
    errors = Errors()
    sections: dict[str, Any] = {}
    for name, values in data.items():
        if isinstance(name, str) and name in PER_HOST_SECTIONS:
            errors.add(
                (*path, name),
                "per-host state, shared by every call to the host: set it in the config "
                f"(per call: {', '.join(PER_CALL_SECTIONS)})",
            )
        elif check_key(name, PER_CALL_SECTIONS, path, errors):
            converted = _section(values, _FIELDS[name], (*path, name), errors)
            if converted:
                sections[name] = converted
    errors.raise_if_any()
    return Overrides(sections) if sections else None


def _section(data: Any, model: Any, path: Path, errors: Errors) -> dict[str, Any]:
    """Each key of *data* converted to its field's type in *model*; errors added, not raised."""
    if not isinstance(data, Mapping):
        check_value(data, model, path, errors)
        return {}
    fields = {field.name: field.type for field in msgspec.structs.fields(model)}
    converted: dict[str, Any] = {}
    for key, value in data.items():
        if not check_key(key, fields, path, errors):
            continue
        kind = fields[key]
        if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
            nested = _section(value, kind, (*path, key), errors)
            if nested:
                converted[key] = nested
            continue
        before = len(errors)
        value = check_value(value, kind, (*path, key), errors)
        if len(errors) == before:
            converted[key] = value
    return converted


def _combined(outer: Overrides, inner: Overrides) -> Overrides:
    key = (outer, inner)
    known = _COMBINED.get(key)
    if known is None:
        known = Overrides(merge_over(outer.sections, inner.sections))
        _remember(_COMBINED, key, known)
    return known


def _frozen(value: Any) -> Any:
    """A hashable stand-in for *value*: equal only for values of the same types, so ``True``
    and ``1``, which a dict holds as one key, stay apart."""
    if isinstance(value, Mapping):
        return ("map", tuple((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(item) for item in value))
    if isinstance(value, (set, frozenset)):
        return ("set", frozenset(_frozen(item) for item in value))
    return (type(value), value)


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _CACHE_SIZE:
        cache.clear()
    cache[key] = value


_VALIDATED: dict[Any, Overrides] = {}
_EFFECTIVE: dict[tuple[int, Overrides], tuple[HostPolicy, HostPolicy]] = {}
_COMBINED: dict[tuple[Overrides, Overrides], Overrides] = {}
