"""Reading a config file: only bounded regular files, and YAML that cannot blow up."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest

from resilient_session import ConfigError
from resilient_session.config import load
from resilient_session.config.file import MAX_BYTES


def _refused(path: Path | str) -> str:
    with pytest.raises(ConfigError) as raised:
        load(path)
    return str(raised.value)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# -- what is read --------------------------------------------------------------------------------


def test_device_is_refused_before_reading():
    """/dev/zero would never end: it is refused as a character device."""
    assert _refused("/dev/zero") == (
        "/dev/zero: cannot read config file: not a regular file (a character device)"
    )


def test_fifo_is_refused_at_once(tmp_path):
    """A FIFO with no writer would block for ever: it is refused without waiting."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    started = time.perf_counter()
    message = _refused(fifo)
    assert time.perf_counter() - started < 1.0
    assert message == f"{fifo}: cannot read config file: not a regular file (a FIFO)"


def test_directory_is_refused(tmp_path):
    """A directory is named as such, not as a decoding or permission error."""
    assert _refused(tmp_path) == (
        f"{tmp_path}: cannot read config file: not a regular file (a directory)"
    )


def test_file_over_one_mib_is_refused(tmp_path):
    """A 2 MiB file is refused by its size; a file of exactly 1 MiB is read."""
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# " + b"x" * (2 * MAX_BYTES))
    assert _refused(big) == f"{big}: cannot read config file: larger than 1 MiB"
    edge = tmp_path / "edge.yaml"
    body = b"defaults: {retry: {max_attempts: 2}}\n"
    edge.write_bytes(body + b"#" * (MAX_BYTES - len(body) - 1) + b"\n")
    assert edge.stat().st_size == MAX_BYTES
    assert load(edge).defaults.retry.max_attempts == 2


def test_non_utf8_file_is_refused(tmp_path):
    """Bytes that are not UTF-8 are a ConfigError naming the file."""
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"defaults: {}\n# caf\xe9\n")
    assert _refused(path).startswith(f"{path}: cannot read config file: not UTF-8")


# -- what the YAML may hold ----------------------------------------------------------------------


def _alias_bomb(levels: int) -> str:
    lines = ['i: &i ["x","x","x","x","x","x","x","x","x"]']
    previous = "i"
    for level in range(levels - 1):
        name = f"l{level}"
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    lines.append(f"defaults: {{retry: {{max_attempts: *{previous}}}}}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [9, 10])
def test_alias_bomb_is_refused_fast_small_and_short(tmp_path, levels):
    """A few hundred bytes standing for 9**9 values: refused in milliseconds, in little memory."""
    path = _write(tmp_path, _alias_bomb(levels))
    assert path.stat().st_size < 500
    tracemalloc.start()
    started = time.perf_counter()
    try:
        message = _refused(path)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message == f"{path}: refused: its aliases expand to more than 100,000 values"
    assert elapsed < 0.5
    assert peak < 4 * 1024 * 1024


def test_aliases_within_the_limit_still_work(tmp_path):
    """Anchors and aliases as configs use them (a shared section) load as before."""
    path = _write(
        tmp_path,
        "defaults:\n  retry: &fast {max_attempts: 2, backoff_base: 0.1}\n"
        "hosts:\n  a.test: {retry: *fast}\n  b.test: {retry: {<<: *fast, max_attempts: 3}}\n",
    )
    config = load(path)
    assert config.for_host("a.test", 443).retry.max_attempts == 2
    assert config.for_host("b.test", 443).retry.max_attempts == 3
    assert config.for_host("b.test", 443).retry.backoff_base == 0.1


def test_wrongly_typed_huge_value_gives_a_short_message():
    """A big value in the wrong place is shown cut to 200 characters, not in full."""
    message = _refused_dict({"defaults": {"retry": {"max_attempts": [["x" * 1000] * 1000] * 1000}}})
    assert message.startswith("defaults.retry.max_attempts: expected int, got array [[")
    assert len(message) <= 260


def _refused_dict(data: object) -> str:
    with pytest.raises(ConfigError) as raised:
        load(data)  # type: ignore[arg-type]
    return str(raised.value)


@pytest.mark.parametrize("depth", [51, 900, 5000])
def test_deep_nesting_is_a_config_error(tmp_path, depth):
    """Hundreds of nested [ ] are refused as too deep, not a RecursionError."""
    path = _write(tmp_path, "defaults: " + "[" * depth + "]" * depth + "\n")
    assert _refused(path) == f"{path}: refused: nested more than 50 levels deep"


def test_deep_nesting_through_aliases_is_refused(tmp_path):
    """Aliases that each add a level are counted as the expanded document would nest."""
    lines = ["a0: &a0 [x]"] + [f"a{n}: &a{n} [*a{n - 1}]" for n in range(1, 60)]
    path = _write(tmp_path, "\n".join(lines) + "\n")
    assert _refused(path) == (f"{path}: refused: nested more than 50 levels deep (through aliases)")


def test_self_referencing_alias_is_refused(tmp_path):
    """An alias inside its own anchor would expand for ever."""
    path = _write(tmp_path, "defaults: &d {retry: *d}\n")
    assert _refused(path) == f"{path}: refused: defaults.retry is an alias of itself"


def test_duplicate_keys_name_the_key_and_both_lines(tmp_path):
    """YAML keeps the last of two equal keys; here both are reported with their lines."""
    path = _write(
        tmp_path,
        "hosts:\n"
        '  "api.test": {retry: {max_attempts: 2}}\n'
        "  other.test: {}\n"
        '  "api.test": {retry: {max_attempts: 3}}\n'
        "defaults: {retry: {max_attempts: 1, max_attempts: 2}}\n",
    )
    assert _refused(path) == (
        f"{path}: 2 errors:\n"
        '  hosts."api.test": duplicate key (lines 2 and 4)\n'
        "  defaults.retry.max_attempts: duplicate key (lines 5 and 5)"
    )


def test_hosts_equal_but_for_case_are_duplicates():
    """Two hosts: keys for one host (case, brackets) are an error naming both."""
    message = _refused_dict({"hosts": {"api.test": {}, "API.Test": {}, "::1": {}, "[::1]": {}}})
    assert message == (
        "2 errors:\n"
        '  hosts."API.Test": names the same host as hosts."api.test"\n'
        '  hosts."[::1]": names the same host as hosts."::1"'
    )


def test_huge_integer_literal_is_a_config_error(tmp_path):
    """An integer past Python's digit limit is a ConfigError, not a bare ValueError."""
    path = _write(tmp_path, "defaults: {retry: {max_attempts: " + "9" * 5000 + "}}\n")
    assert _refused(path).startswith(f"{path}: not valid YAML: ")


def test_control_character_in_the_text_is_a_config_error(tmp_path):
    """A control character YAML forbids is a ConfigError, not a bare yaml ReaderError."""
    path = _write(tmp_path, "\x1f")
    assert _refused(path).startswith(f"{path}: not valid YAML: unacceptable character #x001f")


@pytest.mark.parametrize(
    "text",
    [
        'defaults: !!int ""',
        'defaults: !!float ""',
        '!!int "": 1',
        'defaults: !!bool "x"',
        'defaults: !!timestamp "x"',
    ],
)
def test_a_bad_tagged_scalar_is_a_config_error(tmp_path, text):
    """PyYAML's constructors fail on these with IndexError, KeyError or AttributeError: the
    loader reports a ConfigError naming the file instead."""
    path = tmp_path / "tagged.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=r"tagged\.yaml: not valid YAML: a tagged value"):
        load(path)
