"""Each lower bound pyproject.toml declares, at run time and in the redis, otel and httpx extras,
is the version .ci/floors.txt pins, so the floor CI installs and tests is the one users are
promised."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10 reads the file's few lines itself
    tomllib = None

ROOT = Path(__file__).resolve().parent.parent
FLOOR = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def _declared() -> dict[str, str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    if tomllib is None:
        pytest.skip("reading pyproject.toml needs tomllib (3.11+); the other Pythons check it")
    project = tomllib.loads(text)["project"]
    requirements = [
        *project["dependencies"],
        *project["optional-dependencies"]["redis"],
        *project["optional-dependencies"]["otel"],
        *project["optional-dependencies"]["httpx"],
    ]
    floors: dict[str, str] = {}
    for requirement in requirements:
        match = FLOOR.match(requirement)
        assert match, f"{requirement!r} declares no lower bound"
        floors[_canonical(match[1])] = match[2]
    return floors


def _pinned() -> dict[str, str]:
    pinned: dict[str, str] = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pinned[_canonical(name)] = version.strip()
    return pinned


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _release(version: str) -> tuple[int, ...]:
    parts = [int(part) for part in re.findall(r"\d+", version)[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def test_every_declared_floor_is_the_one_ci_installs():
    declared = _declared()
    pinned = _pinned()
    assert set(declared) == set(pinned)
    for name, floor in declared.items():
        assert _release(floor) == _release(pinned[name]), name


def test_no_floor_is_a_yanked_release():
    """requests 2.32.0 and 2.32.1 were yanked: a resolver that honours yanks never installs
    them, so a floor there is one no user gets."""
    assert _release(_pinned()["requests"]) >= (2, 32, 2)
