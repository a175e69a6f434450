"""What the distributions carry: the wheel is the package alone (no dev server, no test); the
source distribution adds what runs the project's own suite, its dev servers included."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(  # noqa: S603 - this interpreter, hatchling's own command
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as w, tarfile.open(sdist) as s:
        return w.namelist(), [name.split("/", 1)[1] for name in s.getnames() if "/" in name]


def test_the_wheel_is_the_package_alone(built: tuple[list[str], list[str]]) -> None:
    wheel, _ = built
    tops = {name.split("/")[0] for name in wheel if ".dist-info/" not in name}
    assert tops == {"resilient_session"}
    assert "resilient_session/py.typed" in wheel
    assert "resilient_session/testing/upstream.py" in wheel
    assert not [name for name in wheel if "redis_server" in name or "devservers" in name]


def test_the_sdist_carries_the_suite_and_its_dev_servers(
    built: tuple[list[str], list[str]],
) -> None:
    _, sdist = built
    for needed in (
        "devservers/redis_server.py",
        "devservers/redis_cluster.py",
        "tests/conftest.py",
        ".ci/floors.txt",
        "pyproject.toml",
    ):
        assert needed in sdist, needed
    assert not [name for name in sdist if name.startswith((".venv", ".git/"))]
