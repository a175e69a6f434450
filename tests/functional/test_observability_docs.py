"""The examples of docs/observability.md run and print the spans the page shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
HOOK_LINE = "    request_hook=redacting_request_hook(session.config.events.redact_params),\n"


def _example(name: str) -> tuple[str, str]:
    """The code of the page's example *name* and the output the page shows after it."""
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(
        rf"```python\n# {re.escape(name)}\n(.*?)```\n\nprints\n\n```text\n(.*?)```", text, re.S
    )
    assert found is not None, name
    return found.group(1), found.group(2)


def _run(code: str, **env: str) -> str:
    run = subprocess.run(  # noqa: S603 - this interpreter, running the page's own example
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_the_example_prints_the_spans_shown() -> None:
    """Run as a script, the three-try example prints the parent and its three try spans."""
    code, shown = _example("spans.py")
    printed = _run(code)
    assert printed == shown
    assert printed.count("  GET ") == 3


@pytest.mark.parametrize("opt_in", ["", "http", "http/dup"], ids=["default", "stable", "dup"])
def test_the_instrumented_example_prints_no_secret(opt_in: str) -> None:
    """Under each semantic conventions opt-in, the instrumentation's span for the call shows
    the URL redacted as the two try spans under it do, as the page shows."""
    code, shown = _example("instrumented.py")
    assert HOOK_LINE in code
    printed = _run(code, OTEL_SEMCONV_STABILITY_OPT_IN=opt_in)
    assert printed == shown
    assert (printed.count("REDACTED"), printed.count("  GET resilient_session ")) == (6, 2)


def test_without_the_hook_the_instrumentations_span_keeps_the_secret() -> None:
    """The page's line for the example without the hook is what it then prints first."""
    code, shown = _example("instrumented.py")
    without = re.search(
        r"Without the hook, the first line reads `([^`]+)`", DOCS.read_text(encoding="utf-8")
    )
    assert without is not None
    printed = _run(code.replace(HOOK_LINE, ""), OTEL_SEMCONV_STABILITY_OPT_IN="http")
    first = printed.splitlines()[0]
    assert first == "GET opentelemetry.instrumentation.requests " + without.group(1)
    assert printed.splitlines()[1:] == shown.splitlines()[1:]
