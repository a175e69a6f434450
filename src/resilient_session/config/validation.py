"""Validating config data against the policy models, collecting every error with its key path.

msgspec stops at the first error of a conversion. To report every error of a file in one go,
each section is converted key by key against its field's own type (still by msgspec), and the
whole section once more when every key passed, for the rules that relate two keys.
"""

from __future__ import annotations

import difflib
import re
import reprlib
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias, TypeVar, cast

import msgspec

from resilient_session._observe.printable import printable
from resilient_session._observe.redact import redact_text
from resilient_session.errors import ConfigError

Path: TypeAlias = tuple[str | int, ...]
T = TypeVar("T", bound=msgspec.Struct)

# Enough to fix a file in one pass, few enough that the message stays readable.
MAX_REPORTED: Final = 50
# A value is shown cut to this many characters: the file has the rest.
MAX_SHOWN: Final = 200
_MAX_KEY_SHOWN: Final = 80

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 60


class Errors:
    """The errors found so far, each a ``dotted.key.path: what is wrong`` line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def add(self, path: Path, text: str) -> None:
        self.line(f"{dotted(path)}: {text}")

    def line(self, text: str) -> None:
        self.count += 1
        if len(self.lines) < MAX_REPORTED:
            self.lines.append(text)

    def __len__(self) -> int:
        return self.count

    def raise_if_any(self) -> None:
        if self.count:
            raise ConfigError(message(self.lines, self.count))


def message(lines: list[str], count: int) -> str:
    """One error as one line; several as a count, then one indented line each."""
    if count == 1:
        return lines[0]
    body = "".join(f"\n  {line}" for line in lines)
    more = f"\n  ... and {count - len(lines)} more" if count > len(lines) else ""
    return f"{count} errors:{body}{more}"


def check_struct(
    data: Any, model: type[T], path: Path, errors: Errors, *, relations: bool = True
) -> T | None:
    """*data* converted to *model*, or None after adding every error found to *errors*.

    With ``relations=False`` only each key is checked, not the rules between keys (a host
    entry is checked that way, and again once merged over the defaults).
    """
    if not isinstance(data, Mapping):
        return cast("T | None", check_value(data, model, path, errors))
    fields = {field.name: field.type for field in msgspec.structs.fields(model)}
    before = len(errors)
    for key, value in data.items():
        if not check_key(key, fields, path, errors):
            continue
        kind = fields[key]
        if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
            check_struct(value, kind, (*path, key), errors, relations=relations)
        else:
            check_value(value, kind, (*path, key), errors)
    if len(errors) > before or not relations:
        return None
    return cast("T | None", check_value(data, model, path, errors))


def check_key(key: Any, known: Iterable[str], path: Path, errors: Errors) -> bool:
    """True when *key* is one of *known*; else adds the error, with the nearest known key."""
    if not isinstance(key, str):
        errors.add(path, f"a key must be a string, got {type(key).__name__} {shown(key)}")
        return False
    names = list(known)
    if key in names:
        return True
    near = difflib.get_close_matches(key, names, n=1)
    errors.add((*path, key), f"unknown key (did you mean {near[0]}?)" if near else "unknown key")
    return False


def check_value(data: Any, model: Any, path: Path, errors: Errors) -> Any:
    """*data* converted to the type *model*, or None after adding its error to *errors*."""
    try:
        return msgspec.convert(data, model)
    except msgspec.ValidationError as exc:
        errors.line(describe(str(exc), path, data))
        return None


_AT = re.compile(r"^(?P<msg>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)
_NAMED = re.compile(r"^(?P<key>[a-z_]+)(?:\[(?P<index>\d+)\])?: (?P<msg>.*)$", re.DOTALL)


def describe(message: str, prefix: Path, data: Any) -> str:
    """Turn msgspec's message into ``dotted.key.path: what is wrong, got VALUE``."""
    at = _AT.match(message)
    msg, keys = (at.group("msg"), _split_path(at.group("path"))) if at else (message, [])
    named = _NAMED.match(msg)
    if named:
        # A relation between two keys, or one item of a list, raised by a model's
        # __post_init__: name that key, and the item's index.
        keys.append(named.group("key"))
        if named.group("index") is not None:
            keys.append(int(named.group("index")))
        return f"{dotted((*prefix, *keys))}: {_cut(printable(named.group('msg')))}"
    value = _lookup(data, keys)
    text = _cut(printable(_plain(msg)))
    if value is _MISSING or _secret((*prefix, *keys)):
        return f"{dotted((*prefix, *keys))}: {text}"
    joint = " " if "got" in text else ", got "
    return f"{dotted((*prefix, *keys))}: {text}{joint}{shown(value)}"


def _secret(path: Path) -> bool:
    # state.sentinel_password: its value is never shown, right or wrong.
    return bool(path) and isinstance(path[-1], str) and path[-1].endswith("password")


def _split_path(path: str) -> list[str | int]:
    # msgspec writes `$.a.b[3]`.
    return [name or int(index) for name, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path)]


_MISSING: Final = object()


def _lookup(data: Any, keys: list[str | int]) -> Any:
    for key in keys:
        found = (isinstance(key, str) and isinstance(data, Mapping) and key in data) or (
            isinstance(key, int) and isinstance(data, list) and key < len(data)
        )
        if found:
            data = data[key]
        else:
            return _MISSING
    return data


def _plain(message: str) -> str:
    text = message.replace("`", "")
    return text[:1].lower() + text[1:]


def shown(value: Any) -> str:
    """A repr of *value* fit for a one-line message: bounded in length, no control characters.

    reprlib bounds the work as well as the text: an aliased YAML value can be huge.
    """
    try:
        text = _REPR.repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        text = f"<{type(value).__name__} too large to show>"
    # A value may be a URL with a password in it (state.url): the message must not carry it.
    return printable(_cut(redact_text(text)))


def _cut(text: str, limit: int = MAX_SHOWN) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def dotted(keys: Path) -> str:
    """``defaults.retry.max_attempts``; keys that are not plain names are quoted and escaped."""
    text = ""
    for key in keys:
        if isinstance(key, int):
            text += f"[{key}]"
            continue
        if not _NAME.fullmatch(key):
            escaped = _cut(key, _MAX_KEY_SHOWN).replace("\\", "\\\\").replace('"', '\\"')
            key = f'"{printable(escaped)}"'
        text += f".{key}" if text else key
    return text or "<config>"


def one_line(text: str) -> str:
    return " ".join(text.split())
