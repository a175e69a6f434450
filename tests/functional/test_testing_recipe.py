"""The conftest recipes in docs/events.md ("Testing") keep a suite's stdout clean after
capture_logs(): each runs as a real pytest session over a two-test suite."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "events.md"

# Test one captures the library's events; test two calls again, outside any capture.
SUITE = """
import responses
from structlog.testing import capture_logs

from resilient_session import ResilientSession


def _call():
    session = ResilientSession()
    with responses.RequestsMock() as mock:
        mock.add(responses.GET, "http://svc.test/items", status=200)
        assert session.get("http://svc.test/items").status_code == 200


def test_captures():
    with capture_logs() as logs:
        _call()
    assert [e["event"] for e in logs] == ["http.try"]


def test_calls_again():
    _call()
    print("SECOND TEST DONE")
"""


def _recipes() -> dict[str, str]:
    """The conftest.py blocks of the Testing section, by the words after ``for a suite``."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Testing") :].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(# conftest\.py: for a suite (.*?)\n.*?)```", section, re.S)
    return {purpose: code for code, purpose in blocks}


def _stdout_of_suite(tmp_path: Path, conftest: str | None) -> str:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "test_suite.py").write_text(SUITE, encoding="utf-8")
    if conftest is not None:
        (tmp_path / "conftest.py").write_text(conftest, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_suite.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
    return run.stdout


def test_docs_hold_both_recipes():
    """The Testing section gives one conftest for each kind of suite."""
    assert sorted(_recipes()) == [
        "that keeps structlog configured",
        "that never configures structlog",
    ]


def test_without_a_recipe_events_after_capture_logs_reach_stdout(tmp_path):
    """Without a recipe, the second test's http.try is printed to stdout by structlog."""
    out = _stdout_of_suite(tmp_path, None)
    assert out.count("http.try") == 1
    assert out.index("http.try") < out.index("SECOND TEST DONE")


@pytest.mark.parametrize(
    "purpose", ["that never configures structlog", "that keeps structlog configured"]
)
def test_documented_recipe_keeps_stdout_clean(tmp_path, purpose):
    """With either documented conftest, capture_logs still captures and nothing is printed."""
    out = _stdout_of_suite(tmp_path, _recipes()[purpose])
    assert "http.try" not in out
    assert "SECOND TEST DONE" in out
