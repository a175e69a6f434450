"""Every file, link and module the README and docs/ name exists: a module that moves fails here
until the docs follow it."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "resilient_session"
PACKAGE = ROOT / "src" / "resilient_session"

# A path from the project root, as prose and commands write it. Not part of a longer path
# (a URL, ../shared/...), and ending where the name ends (a trailing full stop is prose).
_ROOT_PATH = re.compile(
    r"(?<![\w./-])"
    r"(?:src/resilient_session/[\w./-]*?\.py"
    r"|benchmarks/[\w./-]*?\.py"
    r"|devservers/[\w./-]*?\.py"
    r"|scripts/[\w.-]*\w"
    r"|config/[\w./-]*\w"
    r"|docs/[\w./-]*?\.(?:md|py|json|yaml|png))"
    r"(?![\w/-])"
)
_ROOT_DIRS = ("src/", "benchmarks/", "devservers/", "tests/", "scripts/", "config/", "docs/")
# A module file written relative to the package, as docs/architecture.md names them:
# `stages/deadline.py`, `state/registry.py`, `inbound/`.
_PACKAGE_PATH = re.compile(r"[a-z_]+(?:/[a-z_]+)*(?:\.py|/)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"resilient_session(?:\.\w+)+")
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(resilient_session(?:\.\w+)*)[ \t]+import[ \t]+([\w \t,]+?)"
    r"|import[ \t]+(resilient_session(?:\.\w+)*)(?:[ \t]+as[ \t]+\w+)?)[ \t]*(?:#.*)?$",
    re.MULTILINE,
)
_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


class Ref(NamedTuple):
    """One name a doc uses, and where."""

    doc: Path
    line: int
    text: str

    def __str__(self) -> str:
        where = self.doc.relative_to(ROOT) if self.doc.is_relative_to(ROOT) else self.doc
        return f"{where}:{self.line}: {self.text}"


def documents() -> list[Path]:
    """The README and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _without_code_blocks(text: str) -> str:
    """The text with fenced blocks blanked out, line numbers kept."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def root_paths(doc: Path) -> Iterator[Ref]:
    """Paths from the project root, in prose, code spans and commands alike."""
    text = doc.read_text(encoding="utf-8")
    for match in _ROOT_PATH.finditer(text):
        yield Ref(doc, _line(text, match.start()), match.group(0))


def package_paths(doc: Path) -> Iterator[Ref]:
    """Module files named relative to src/resilient_session/, in code spans."""
    text = doc.read_text(encoding="utf-8")
    for match in _CODE_SPAN.finditer(text):
        span = match.group(1)
        if span.startswith(_ROOT_DIRS) or not _PACKAGE_PATH.fullmatch(span):
            continue
        if "/" in span or doc.name == "architecture.md":
            yield Ref(doc, _line(text, match.start()), span)


def links(doc: Path) -> Iterator[Ref]:
    """Relative link targets (files, anchors or both), outside fenced code."""
    text = _without_code_blocks(doc.read_text(encoding="utf-8"))
    for match in _LINK.finditer(text):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        yield Ref(doc, _line(text, match.start()), target)


def telemetry_names() -> frozenset[str]:
    """The OpenTelemetry attribute, event and instrument names under ``resilient_session.``
    that the emitter writes: names of telemetry, not modules."""
    sources = "".join(
        (SRC / "_observe" / name).read_text(encoding="utf-8")
        for name in ("otel.py", "otel_metrics.py")
    )
    return frozenset(re.findall(r'"(resilient_session\.[\w.]+)"', sources))


def dotted_names(doc: Path) -> Iterator[Ref]:
    """`resilient_session.x.y` in code spans, and what Python blocks import from the package;
    the emitter's telemetry names aside."""
    text = doc.read_text(encoding="utf-8")
    prose = _without_code_blocks(text)
    telemetry = telemetry_names()
    for match in _CODE_SPAN.finditer(prose):
        dotted = _DOTTED.match(match.group(1))
        if dotted and dotted.group(0) not in telemetry:
            yield Ref(doc, _line(prose, match.start()), dotted.group(0))
    for block in _FENCE.finditer(text):
        for imp in _IMPORT.finditer(block.group(0)):
            line = _line(text, block.start() + imp.start() + len(imp.group(0)) - 1)
            if imp.group(3):
                yield Ref(doc, line, imp.group(3))
                continue
            for name in imp.group(2).split(","):
                yield Ref(doc, line, f"{imp.group(1)}.{name.split()[0]}")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """Every anchor a page's headings give it, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for match in _HEADING.finditer(_without_code_blocks(doc.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def in_package(name: str) -> bool:
    """Whether a path relative to the package exists, or a bare module name anywhere in it."""
    return (PACKAGE / name).exists() if "/" in name else any(PACKAGE.rglob(name))


def broken_link(ref: Ref) -> str | None:
    """Why a link does not resolve, or None if it does."""
    path, _, anchor = ref.text.partition("#")
    target = (ref.doc.parent / path).resolve() if path else ref.doc
    if not target.exists():
        return "no such file"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"no heading #{anchor} in {target.name}"
    return None


def resolves(dotted: str) -> bool:
    """Whether the longest importable prefix of *dotted* has the rest as attributes."""
    parts = dotted.split(".")
    for size in range(len(parts), 0, -1):
        name = ".".join(parts[:size])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as error:
            # Only a missing module of the name itself means "try a shorter prefix"; a
            # dependency missing inside a module that exists is an error worth seeing.
            if error.name is None or not f"{name}.".startswith(f"{error.name}."):
                raise
            continue
        for attr in parts[size:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _all(scan: Callable[[Path], Iterator[Ref]]) -> list[Ref]:
    return [ref for doc in documents() for ref in scan(doc)]


def test_every_path_from_the_root_exists() -> None:
    """Every src/, benchmarks/, scripts/, config/ and docs/ path the docs name exists."""
    refs = _all(root_paths)
    missing = [str(ref) for ref in refs if not (ROOT / ref.text).exists()]
    assert missing == []
    assert len(refs) >= 50, "the scan found fewer paths than the docs hold"


def test_every_module_file_named_relative_to_the_package_exists() -> None:
    """`stages/deadline.py` and the like are files under src/resilient_session/; a bare `x.py`
    in docs/architecture.md is a module somewhere in the package."""
    refs = _all(package_paths)
    missing = [str(ref) for ref in refs if not in_package(ref.text)]
    assert missing == []
    assert len(refs) >= 30, "the scan found fewer module files than architecture.md names"


def test_every_relative_link_reaches_a_file_and_heading() -> None:
    """Every relative markdown link points at an existing file, and its #anchor at a heading."""
    refs = _all(links)
    broken = [f"{ref} ({why})" for ref in refs if (why := broken_link(ref))]
    assert broken == []
    assert len(refs) >= 30, "the scan found fewer links than the docs hold"


def test_every_dotted_name_imports() -> None:
    """Every `resilient_session.x.y` the docs write is a module, or a module and its attribute."""
    refs = _all(dotted_names)
    unresolved = [str(ref) for ref in refs if not resolves(ref.text)]
    assert unresolved == []
    assert len(refs) >= 8, "the scan found fewer module names than the docs hold"


@pytest.fixture
def made_up(tmp_path: Path) -> Path:
    """A page that names things that do not exist."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "Run `python benchmarks/nowhere.py`; the stage is `stages/nowhere.py`.\n"
        "See [results](results.md), [this](#page), [that](#nowhere).\n"
        "`resilient_session.inbound.NoSuchMiddleware` and `resilient_session.nowhere.thing`.\n"
        "```python\nfrom resilient_session import ResilientSession, NoSuchThing\n```\n",
        encoding="utf-8",
    )
    return page


def test_the_checks_report_made_up_names(made_up: Path) -> None:
    """A made-up path, module file, link, anchor and module name are each reported."""
    assert [(ref.text, (ROOT / ref.text).exists()) for ref in root_paths(made_up)] == [
        ("benchmarks/nowhere.py", False)
    ]
    assert [(ref.text, in_package(ref.text)) for ref in package_paths(made_up)] == [
        ("stages/nowhere.py", False)
    ]
    assert [(ref.text, broken_link(ref)) for ref in links(made_up)] == [
        ("results.md", "no such file"),
        ("#page", None),
        ("#nowhere", "no heading #nowhere in page.md"),
    ]
    names = {ref.text: resolves(ref.text) for ref in dotted_names(made_up)}
    assert names == {
        "resilient_session.inbound.NoSuchMiddleware": False,
        "resilient_session.nowhere.thing": False,
        "resilient_session.ResilientSession": True,
        "resilient_session.NoSuchThing": False,
    }
