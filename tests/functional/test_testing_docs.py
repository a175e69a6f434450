"""The examples of docs/testing.md run as a real pytest suite and pass, without a real sleep."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "testing.md"

# Any real sleep in the examples fails the suite: they are meant to wait no real time.
GUARD = """
import time

import pytest


@pytest.fixture(autouse=True)
def _no_real_sleep(monkeypatch):
    def refuse(seconds):
        raise AssertionError(f"a real {seconds} s sleep")

    monkeypatch.setattr(time, "sleep", refuse)
"""


def _examples() -> dict[str, str]:
    """Every python block of the page, by the file name its first line gives."""
    blocks = re.findall(r"```python\n# (\S+\.py)\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    return dict(blocks)


def test_every_example_names_its_file():
    """Each python block starts with the file it is: none is left out of the run below."""
    text = DOCS.read_text(encoding="utf-8")
    assert text.count("```python\n") == len(_examples()) == 6


def test_the_examples_pass_as_a_suite(tmp_path):
    """Written out as files, the examples pass under pytest: every test of theirs, and the
    fixture of requests-mock's plugin, with a guard that fails on any real sleep."""
    examples = _examples()
    for name, code in examples.items():
        if name == "conftest.py":
            code += GUARD
        (tmp_path / name).write_text(code, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    tests = sum(code.count("\ndef test_") for code in examples.values())
    run = subprocess.run(  # noqa: S603 - this interpreter, running files this test wrote
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{tests} passed" in run.stdout
    assert tests == 7
