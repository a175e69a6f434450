"""Turning msgspec validation errors into ``dotted.key.path: what is wrong, got VALUE``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from .errors import ConfigError


def convert(data: Any, model: type[Any], prefix: tuple[str, ...]) -> Any:
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
        return f"{dotted((*prefix, *keys))}: unknown key"
    if named:
        # A relation between two keys, raised by a model's __post_init__: name the second key.
        keys.append(named.group("key"))
        return f"{dotted((*prefix, *keys))}: {named.group('msg')}"
    value = _lookup(data, keys)
    if value is _MISSING:
        shown = ""
    elif "got" in msg:
        shown = f" {value!r}"
    else:
        shown = f", got {value!r}"
    return f"{dotted((*prefix, *keys))}: {_plain(msg)}{shown}"


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


def dotted(keys: tuple[str, ...] | list[str]) -> str:
    text = ""
    for key in keys:
        if re.fullmatch(r"\[\d+\]", key):
            text += key
        else:
            name = key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else f'"{key}"'
            text += f".{name}" if text else name
    return text or "<config>"


def one_line(text: str) -> str:
    return " ".join(text.split())
