"""docs/architecture.md's "Hot path" table and the source agree: every ``# hot path: <name>``
comment in src names a row, every row is named by some comment, and every test a row says
pins it exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "resilient_session"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

_MARK = re.compile(r"# hot path: ([a-z][a-z-]*)")
_ROW = re.compile(r"^\| `([a-z][a-z-]*)` \|(.*)\|\s*$", re.MULTILINE)
_TEST_PATH = re.compile(r"tests/[\w/]+\.py")


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _rows() -> dict[str, str]:
    section = _section(ARCHITECTURE.read_text(encoding="utf-8"), "## Hot path")
    return dict(_ROW.findall(section))


def _marks() -> dict[str, list[str]]:
    marks: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in _MARK.findall(line):
                marks.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{number}")
    return marks


def test_every_hot_path_comment_names_a_row_of_the_table():
    """A ``# hot path:`` comment whose name the table lacks fails, with where it is."""
    rows = _rows()
    unknown = {name: where for name, where in _marks().items() if name not in rows}
    assert unknown == {}


def test_every_row_of_the_table_is_named_by_a_comment_in_src():
    """A row no site names any more (its shortcut gone) fails until the row goes too."""
    marks = _marks()
    assert [name for name in _rows() if name not in marks] == []


def test_the_table_has_the_shortcuts_the_source_depends_on():
    """The cross-room pairs and the happy test are rows, and each row names a pinning test
    that exists (or the instruction guard)."""
    rows = _rows()
    assert {"happy", "answered", "owned", "linked-stages", "first-try-inline"} <= set(rows)
    missing = []
    for name, rest in rows.items():
        pins = rest.rsplit("|", 1)[-1]
        paths = _TEST_PATH.findall(pins)
        if not paths:
            assert pins.strip() == "the guard", name
        missing += [f"{name}: {p}" for p in paths if not (ROOT / p).is_file()]
    assert missing == []
