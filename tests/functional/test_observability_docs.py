"""The example of docs/observability.md runs and prints the spans the page shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_the_example_prints_the_spans_shown() -> None:
    """Run as a script, the three-try example prints the parent and its three try spans."""
    text = DOCS.read_text(encoding="utf-8")
    code = re.search(r"```python\n# spans\.py\n(.*?)```", text, re.S)
    shown = re.search(r"prints\n\n```text\n(.*?)```", text, re.S)
    assert code is not None
    assert shown is not None
    run = subprocess.run(  # noqa: S603 - this interpreter, running the page's own example
        [sys.executable, "-c", code.group(1)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == shown.group(1)
    assert run.stdout.count("  GET ") == 3
