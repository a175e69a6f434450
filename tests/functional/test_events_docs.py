"""The stdlib logging recipe of docs/events.md: an application that configures only the
standard logging module, with the page's LOGGING passed to dictConfig as Django passes it,
gets each try as a JSON line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema

DOCS = Path(__file__).resolve().parents[2] / "docs"
SECRET = "s3cr3t-t0ken"  # noqa: S105 - planted, to be found nowhere

# What Django does with the settings module, then one call that is retried twice.
APPLICATION = f"""
import logging.config

import settings

logging.config.dictConfig(settings.LOGGING)

from resilient_session import ResilientSession
from resilient_session.testing import FlakyUpstream, Reply, fast

with fast(), FlakyUpstream() as upstream:
    upstream.script("/items", Reply(503), Reply(503), Reply(200, body=b"ok"))
    response = ResilientSession().get(upstream.url("/items") + "?token={SECRET}")
    print(response.status_code, upstream.hits("/items"), upstream.base_url)
"""


def _settings() -> str:
    text = (DOCS / "events.md").read_text(encoding="utf-8")
    found = re.search(r"```python\n# settings\.py\n(.*?)```", text, re.S)
    assert found is not None
    return found.group(1)


def test_the_logging_recipe_writes_each_try_as_a_json_line(tmp_path: Path) -> None:
    """The page's settings.py, through logging.config.dictConfig: a 503, 503, 200 call writes
    three http.try lines to stderr, each valid against the events schema, numbered 1-3 with
    each status and decision, the token hidden, and nothing on stdout but the script's own."""
    (tmp_path / "settings.py").write_text(_settings(), encoding="utf-8")
    run = subprocess.run(  # noqa: S603 - this interpreter, the page's settings and a call
        [sys.executable, "-c", APPLICATION],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    status, hits, base = run.stdout.split()
    assert (status, hits) == ("200", "3")
    lines = run.stderr.splitlines()
    events = [json.loads(line) for line in lines]
    schema = json.loads((DOCS / "events.schema.json").read_text(encoding="utf-8"))
    for event in events:
        jsonschema.validate(event, schema)
    assert [
        (e["event"], e["level"], e["attempt"], e["status"], e["decision"], e["reason"])
        for e in events
    ] == [
        ("http.try", "info", 1, 503, "retry", "overload"),
        ("http.try", "info", 2, 503, "retry", "overload"),
        ("http.try", "info", 3, 200, "success", "ok"),
    ]
    assert {e["url"] for e in events} == {f"{base}/items?token=REDACTED"}
    assert SECRET not in run.stderr
