"""The examples of docs/degrading.md run as a real pytest suite, against loopback upstreams,
and pass: stale answers while a host is down, a POST queued, requests-cache's stale_if_error."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "degrading.md"


def _examples() -> dict[str, str]:
    """Every python block of the page, by the file name its first line gives."""
    blocks = re.findall(r"```python\n# (\S+\.py)\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    return dict(blocks)


def test_every_example_names_its_file():
    text = DOCS.read_text(encoding="utf-8")
    assert text.count("```python\n") == len(_examples()) == 3


def test_the_examples_pass_as_a_suite(tmp_path):
    examples = _examples()
    for name, code in examples.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    run = subprocess.run(  # noqa: S603 - this interpreter, running files this test wrote
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout
