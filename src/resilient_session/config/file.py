"""Reading a config file: a bounded regular file, parsed as safe YAML that cannot blow up.

A config path may come from an environment variable, so whatever it names must fail fast
and small: a device or a FIFO is refused before a byte is read, a file is read up to 1 MiB,
and a YAML document is refused when it nests too deeply, expands its aliases past a sane
size (an "alias bomb": a few hundred bytes that stand for billions of nodes) or repeats a key.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Final

import yaml

from resilient_session.errors import ConfigError

from .validation import Errors, dotted, one_line
from .validation import Path as KeyPath

MAX_BYTES: Final = 1 << 20
# Nodes of the document as it would be with every alias written out; a real config has a few
# hundred.
MAX_NODES: Final = 100_000
# Nested collections; a real config nests four deep.
MAX_DEPTH: Final = 50

_MERGE_TAG: Final = "tag:yaml.org,2002:merge"


def read(path: Path, errors: Errors) -> Any:
    """The YAML document in the file at *path*, or ConfigError saying why it is refused.

    A repeated key is added to *errors*, to be reported with the rest of the file's errors.
    """
    data = parse(_read_text(path), str(path), errors)
    if data is None:
        raise ConfigError(f"{path}: config file is empty")
    return data


def _read_text(path: Path) -> str:
    def refuse(reason: str) -> ConfigError:
        return ConfigError(f"{path}: cannot read config file: {reason}")

    too_big = f"larger than {MAX_BYTES >> 20} MiB"

    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refuse(f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > MAX_BYTES:
            raise refuse(too_big)
        data = _read_at_most(fd, MAX_BYTES + 1)
    except ConfigError:  # an OSError too, through requests.RequestException
        raise
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:  # it grew after fstat
        raise refuse(too_big)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(f"not UTF-8: {exc}") from None


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit and (chunk := os.read(fd, limit - size)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((name for test, name in kinds.items() if test(mode)), "not a file")


class _TooDeep(yaml.YAMLError):
    pass


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer stops at MAX_DEPTH instead of recursing into a RecursionError."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(f"nested more than {MAX_DEPTH} levels deep")
            node = super().compose_node(parent, index)
            assert node is not None  # noqa: S101 - composing a node always gives one
            return node
        finally:
            self._depth -= 1


def parse(text: str, origin: str, errors: Errors) -> Any:
    """The YAML document in *text*, as ``yaml.safe_load`` gives it, or ConfigError.

    Every message starts with *origin*, the file's name.
    """
    try:
        # The reader checks the text for unprintable characters as it is built.
        loader = _Loader(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML: {one_line(str(exc))}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _Walk(loader, errors).measure(node, 0, ())
        return loader.construct_document(node)
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    except _TooDeep as exc:
        raise ConfigError(f"{origin}: refused: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None)
        if mark is not None and problem:
            where = f"{origin}:{mark.line + 1}:{mark.column + 1}"
            raise ConfigError(f"{where}: not valid YAML: {one_line(problem)}") from None
        raise ConfigError(f"{origin}: not valid YAML: {one_line(str(exc))}") from None
    except ValueError as exc:  # an integer past Python's limit on digits
        raise ConfigError(f"{origin}: not valid YAML: {one_line(str(exc))}") from None
    except (IndexError, KeyError, AttributeError, TypeError, OverflowError) as exc:
        # PyYAML's constructors fail this way on a bad tagged scalar (`!!int ""`, `!!bool x`).
        raise ConfigError(
            f"{origin}: not valid YAML: a tagged value cannot be read ({type(exc).__name__})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{origin}: refused: nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()


class _Walk:
    """One pass over the composed node graph, before anything is constructed.

    Sizes are counted as the expanded document would have them, but each node is visited once
    (an alias is the same node object again), so a bomb is measured in microseconds.
    """

    def __init__(self, loader: _Loader, errors: Errors) -> None:
        self._loader = loader
        self._errors = errors
        self._measured: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, height)
        self._open: set[int] = set()

    def measure(self, node: yaml.Node, depth: int, path: KeyPath) -> tuple[int, int]:
        known = self._measured.get(id(node))
        if known is not None:
            if depth + known[1] > MAX_DEPTH:
                raise _TooDeep(f"nested more than {MAX_DEPTH} levels deep (through aliases)")
            return known
        if id(node) in self._open:
            raise ConfigError(f"refused: {dotted(path)} is an alias of itself")
        if depth > MAX_DEPTH:
            raise _TooDeep(f"nested more than {MAX_DEPTH} levels deep (through aliases)")
        self._open.add(id(node))
        nodes, height = 1, 0
        for child, child_path in self._children(node, path):
            size, child_height = self.measure(child, depth + 1, child_path)
            nodes += size
            height = max(height, child_height + 1)
            if nodes > MAX_NODES:
                raise ConfigError(f"refused: its aliases expand to more than {MAX_NODES:,} values")
        self._open.discard(id(node))
        self._measured[id(node)] = (nodes, height)
        return nodes, height

    def _children(self, node: yaml.Node, path: KeyPath) -> list[tuple[yaml.Node, KeyPath]]:
        if isinstance(node, yaml.SequenceNode):
            return [(child, (*path, index)) for index, child in enumerate(node.value)]
        if not isinstance(node, yaml.MappingNode):
            return []
        children: list[tuple[yaml.Node, KeyPath]] = []
        lines: dict[Any, int] = {}
        for key_node, value_node in node.value:
            name = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            children += [(key_node, path), (value_node, (*path, name))]
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self._loader.construct_object(key_node)
            line = key_node.start_mark.line + 1
            try:
                first = lines.get(key)
                if first is None:
                    lines[key] = line
                    continue
            except TypeError:  # unhashable: the constructor says so later
                continue
            self._errors.add((*path, name), f"duplicate key (lines {first} and {line})")
        return children
