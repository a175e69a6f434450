"""`stats` reads the library's events whatever JSON formatter wrote them, and says so when a
file holds none of them."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
import structlog
from pythonjsonlogger.json import JsonFormatter
from responses.registries import OrderedRegistry

from resilient_session import ResilientSession
from resilient_session.cli import EXIT_USAGE, main
from resilient_session.testing import FakeClock

URL = "http://svc.test/items"
HOST = "http://svc.test:80"


class RecordFields(logging.Formatter):
    """A stdlib JSON formatter as many applications write one: every field of the record,
    the unformatted message under ``msg``."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {key: value for key, value in vars(record).items() if _plain(value)}
        return json.dumps(fields)


def _plain(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


@pytest.fixture
def through_stdlib(tmp_path: Path) -> Iterator[tuple[Path, logging.FileHandler]]:
    """structlog hands every event to stdlib logging, which writes the lines to a file."""
    path = tmp_path / "events.jsonl"
    handler = logging.FileHandler(path, encoding="utf-8")
    logger = logging.getLogger("resilient_session")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    structlog.configure(
        processors=[structlog.stdlib.render_to_log_kwargs],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
    )
    try:
        yield path, handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        handler.close()


def _three_tries() -> None:
    """One call that takes three tries: 503, 503, 200."""
    config = {"defaults": {"retry": {"backoff_base": 0.05, "backoff_cap": 0.1}}}
    session = ResilientSession(config, clock=FakeClock())
    with responses.RequestsMock(registry=OrderedRegistry) as mock:
        for status in (503, 503, 200):
            mock.add(responses.GET, URL, status=status)
        assert session.get(URL).status_code == 200
    session.close()


def _stats(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["stats", "--json", str(path)]) == 0
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    return summary


def test_python_json_logger_lines_count_the_tries(through_stdlib, capsys):
    """Lines written by python-json-logger (the event under "message") give the call's three
    tries and two retries."""
    path, handler = through_stdlib
    handler.setFormatter(JsonFormatter())
    _three_tries()
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert (first["message"], "event" in first) == ("http.try", False)
    summary = _stats(path, capsys)
    row = summary["hosts"][HOST]
    assert (row["calls"], row["tries"], row["retries"], row["refused"]) == (1, 3, 2, 0)
    assert (summary["lines"], summary["used"]) == (3, 3)
    assert summary["skipped"]["total"] == 0


def test_stdlib_record_fields_under_msg_count_the_tries(through_stdlib, capsys):
    """Lines of a stdlib formatter that dumps the record (the event under "msg") count too."""
    path, handler = through_stdlib
    handler.setFormatter(RecordFields())
    _three_tries()
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert (first["msg"], "message" in first, "event" in first) == ("http.try", False, False)
    summary = _stats(path, capsys)
    row = summary["hosts"][HOST]
    assert (row["calls"], row["tries"], row["retries"]) == (1, 3, 2)
    assert summary["used"] == summary["lines"]


@pytest.mark.parametrize(
    "content",
    [
        "",
        "Starting worker\nplain text\n",
        '{"event": "app.ready"}\n{"message": "user logged in", "host": "x"}\n',
        '{"msg": "http.try", "host": "h"}\n',
    ],
    ids=["empty", "plain-text", "other-events", "malformed-only"],
)
def test_a_file_with_no_event_exits_2_saying_why(tmp_path, capsys, content):
    """No line used at all is bad input: exit 2, one line on stderr naming the counts, no
    figures on stdout."""
    path = tmp_path / "app.log"
    path.write_text(content, encoding="utf-8")
    assert main(["stats", str(path)]) == EXIT_USAGE == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"resilient-session: {path}: no event found in the input (")
    assert f"({content.count(chr(10))} lines read" in lines[0]
    assert "under event, message or msg" in lines[0]
