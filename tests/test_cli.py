"""The command line: get, check and stats, in process and as a real subprocess."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from resilient_session.cli import main
from resilient_session.upstream import FlakyUpstream, Hang, Reply, refused_url

RECORDED = Path(__file__).resolve().parent / "data" / "events.jsonl"

CONFIG = """\
defaults:
  retry: {max_attempts: 3}
hosts:
  "api.example.com": {breaker: {failure_threshold: 3}}
  "*.internal.example:8443": {retry: {max_attempts: 2}}
"""

# Real time passes in the subprocess tests, so retries wait only milliseconds.
FAST = "defaults:\n  retry: {backoff_base: 0.01, backoff_cap: 0.05}\n"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


@pytest.fixture
def fast_config(tmp_path: Path) -> Path:
    path = tmp_path / "fast.yaml"
    path.write_text(FAST, encoding="utf-8")
    return path


@pytest.fixture
def upstream() -> Iterator[FlakyUpstream]:
    with FlakyUpstream() as up:
        yield up


def _one_error_line(err: str) -> str:
    """The single line of *err*, asserting there is exactly one and no traceback."""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own interpreter and module, fixed arguments
        [sys.executable, "-m", "resilient_session", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _split_stderr(err: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON events and the other lines of a subprocess's stderr."""
    assert "Traceback" not in err
    events, others = [], []
    for line in err.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
        else:
            others.append(line)
    return events, others


# -- usage ---------------------------------------------------------------------------------------


def test_help_documents_the_exit_codes(capsys):
    """--help exits 0 and its epilog names exit codes 0, 1 and 2."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out
    for code in ("0  success", "1  the request failed", "2  bad usage or bad config"):
        assert code in out


def test_get_help_documents_the_exit_codes(capsys):
    """get --help shows -X, -H, -d, --config, --deadline and the exit codes."""
    assert main(["get", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("-X METHOD", "-H 'NAME: VALUE'", "-d DATA", "--config FILE", "--deadline"):
        assert flag in out
    assert "2  bad usage or bad config" in out


def test_unknown_flag_is_one_line_and_exit_2(capsys):
    """An unknown flag gives exit 2 and one line naming it, not argparse's usage block."""
    assert main(["get", "--bogus", "http://127.0.0.1:1/"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == (
        "resilient-session: unrecognized arguments: --bogus (see resilient-session --help)"
    )


def test_missing_command_is_exit_2(capsys):
    """No command at all is bad usage: exit 2, one line."""
    assert main([]) == 2
    assert "required: COMMAND" in _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("notaurl", "give an absolute http:// or https:// URL"),
        ("ftp://127.0.0.1/file", "give an absolute http:// or https:// URL"),
        ("http:///path", "give an absolute http:// or https:// URL"),
        ("http://127.0.0.1:99999/", "out of range"),
    ],
)
def test_bad_url_is_exit_2(capsys, url, says):
    """A URL that is not absolute http(s), or has a bad port, is bad usage: exit 2."""
    assert main(["get", url]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"resilient-session: bad URL {url!r}: ")
    assert says in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-H", "NoColon"], "bad header 'NoColon': use -H 'Name: value'"),
        (["-H", "Bad Name: x"], "bad header 'Bad Name: x'"),
        (["--deadline", "0"], "must be a positive number of seconds, got '0'"),
        (["--deadline", "soon"], "not a number of seconds: 'soon'"),
        (["-X", "GET /"], "bad method 'GET /'"),
    ],
)
def test_bad_get_options_are_exit_2(capsys, args, says):
    """A malformed header, deadline or method is bad usage: exit 2, one line."""
    assert main(["get", *args, "http://127.0.0.1:1/"]) == 2
    assert says in _one_error_line(capsys.readouterr().err)


def test_get_with_bad_config_is_exit_2(capsys, tmp_path):
    """get with an invalid config exits 2 naming the key, before any request is sent."""
    path = tmp_path / "bad.yaml"
    path.write_text("defaults:\n  retry: {max_attempts: 0}\n", encoding="utf-8")
    assert main(["get", "--config", str(path), "http://127.0.0.1:1/"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    expected = "defaults.retry.max_attempts: expected int >= 1, got 0"
    assert line == f"resilient-session: {path}: {expected}"


def test_unexpected_error_is_one_line_not_a_traceback(capsys, monkeypatch):
    """A bug inside a command still ends as one stderr line and exit 1, never a traceback."""

    def broken(self, line):
        raise RuntimeError("boom")

    monkeypatch.setattr("resilient_session.stats.StatsAggregator.feed", broken)
    assert main(["stats", str(RECORDED)]) == 1
    assert _one_error_line(capsys.readouterr().err) == (
        "resilient-session: internal error: RuntimeError: boom"
    )


# -- check ---------------------------------------------------------------------------------------


def test_check_valid_file(capsys, config_file):
    """A valid file prints one ok line with its 2 host entries and exits 0."""
    assert main(["check", str(config_file)]) == 0
    assert capsys.readouterr().out == f"{config_file}: ok (2 host entries)\n"


def test_check_host_prints_the_merged_policy_as_yaml(capsys, config_file):
    """--host api.example.com gives its failure_threshold 3 over the defaults' max_attempts 3."""
    assert main(["check", str(config_file), "--host", "api.example.com"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first == (
        f'# {config_file}: ok; policy for api.example.com:443 (hosts."api.example.com" over '
        "defaults)"
    )
    policy = yaml.safe_load(out)
    assert policy["breaker"]["failure_threshold"] == 3
    assert policy["retry"]["max_attempts"] == 3
    assert policy["retry"]["overload_statuses"] == [429, 503]
    assert policy["timeout"] == {"connect": 5.0, "read": 30.0}


@pytest.mark.parametrize(
    ("host", "attempts", "threshold"),
    [
        ("db.internal.example:8443", 2, 5),
        ("https://db.internal.example:8443", 2, 5),
        ("db.internal.example", 3, 5),
        ("API.example.com:443", 3, 3),
        ("[::1]:8080", 3, 5),
    ],
)
def test_check_host_as_json(capsys, config_file, host, attempts, threshold):
    """--host accepts host, host:port, a URL and [ipv6]:port; wildcards match on the port."""
    assert main(["check", str(config_file), "--host", host, "--json"]) == 0
    policy = json.loads(capsys.readouterr().out)
    assert (policy["retry"]["max_attempts"], policy["breaker"]["failure_threshold"]) == (
        attempts,
        threshold,
    )


@pytest.mark.parametrize("host", ["a:b:c", "h:0", "h:70000", "h/path", "user@h"])
def test_check_bad_host_is_exit_2(capsys, config_file, host):
    """A --host that is not host, host:port or [ipv6]:port is bad usage: exit 2."""
    assert main(["check", str(config_file), "--host", host]) == 2
    assert f"bad --host {host!r}" in _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("defaults: [\n", "not valid YAML"),
        ("", "config file is empty"),
        ("defaults:\n  retry: {max_attempts: 0}\n", "defaults.retry.max_attempts: expected int"),
        ("defaults:\n  retry: {max_atempts: 2}\n", "defaults.retry.max_atempts: unknown key"),
        ('hosts:\n  "a.test": {breaker: {recovery_timeout: -1}}\n', '"a.test"'),
    ],
)
def test_check_bad_file_is_exit_2(capsys, tmp_path, text, says):
    """Bad YAML, an empty file or a bad value: exit 2, one line naming the file and key."""
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["check", str(path)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"resilient-session: {path}:")
    assert says in line


def test_check_missing_file_is_exit_2(capsys, tmp_path):
    """A file that does not exist: exit 2, one line with the OS's reason."""
    missing = tmp_path / "nope.yaml"
    assert main(["check", str(missing)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.endswith(f"{missing}: cannot read config file: No such file or directory")


# -- stats ---------------------------------------------------------------------------------------


def test_stats_table_from_recorded_file(capsys):
    """The recorded file prints one row per host with its calls, tries and percentiles."""
    assert main(["stats", str(RECORDED)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "host",
        "calls",
        "tries",
        "tries/call",
        "retries",
        "ok",
        "give-ups",
        "fail-fasts",
        "trips",
        "p50",
        "total",
        "p99",
        "total",
    ]
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in lines[1:3]}
    # p99 1.0 reads 0.990: the histogram reports within 1 % (docs/events.md).
    assert rows == {
        "http://127.0.0.1:8080": "5 8 1.60 3 2 3 0 0 0.050 s 0.402 s",
        "http://127.0.0.1:9090": "5 6 1.20 1 1 2 2 1 0.020 s 0.990 s",
    }
    assert "  http://127.0.0.1:9090  breaker_open=1 deadline=1" in lines
    assert "  http://127.0.0.1:9090  closed->open=1 half_open->closed=1 open->half_open=1" in lines
    assert lines[-1] == (
        "21 lines read, 4 skipped (2 not JSON, 1 other events, 1 malformed); "
        "p50/p99 of each call's final try, within 1%"
    )


def test_stats_json_from_stdin(capsys, monkeypatch):
    """With no FILE, stats reads stdin; --json gives the same figures as one document."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(RECORDED.read_text(encoding="utf-8")))
    assert main(["stats", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    first = summary["hosts"]["http://127.0.0.1:8080"]
    assert (first["calls"], first["tries"], first["tries_per_call"], first["retries"]) == (
        5,
        8,
        1.6,
        3,
    )
    assert summary["hosts"]["http://127.0.0.1:9090"]["fail_fasts"] == {"breaker_open": 2}
    assert summary["skipped"]["total"] == 4


def test_stats_empty_input(capsys, monkeypatch):
    """No input at all is not an error: 'no events' and 0 lines read, exit 0."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["stats", "-"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "no events"
    assert out[-1].startswith("0 lines read, 0 skipped")


def test_stats_missing_file_is_exit_2(capsys, tmp_path):
    """stats on a file that does not exist: exit 2, one line."""
    missing = tmp_path / "events.jsonl"
    assert main(["stats", str(missing)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == f"resilient-session: {missing}: cannot read: No such file or directory"


# -- as a subprocess, against a real loopback upstream --------------------------------------------


@pytest.mark.integration
def test_subprocess_get_200(upstream):
    """get prints the body to stdout, one success event to stderr, and exits 0."""
    upstream.script("/hello", Reply(200, body=b"hello, world\n"))
    done = _run("get", upstream.url("/hello"))
    assert (done.returncode, done.stdout) == (0, "hello, world\n")
    events, others = _split_stderr(done.stderr)
    assert others == []
    assert [(e["event"], e["attempt"], e["status"], e["decision"]) for e in events] == [
        ("http.try", 1, 200, "success")
    ]
    assert events[0]["host"] == f"http://127.0.0.1:{upstream.port}"


@pytest.mark.integration
def test_subprocess_get_retries_to_success(upstream, fast_config):
    """503, 503, 200 gives exit 0, the 200's body, and three events: retry, retry, success."""
    upstream.script("/items", Reply(503), Reply(503), Reply(200, body=b"[1, 2]"))
    done = _run("get", "--config", str(fast_config), upstream.url("/items"))
    assert (done.returncode, done.stdout) == (0, "[1, 2]")
    events, others = _split_stderr(done.stderr)
    assert others == []
    assert [(e["attempt"], e["status"], e["decision"], e["reason"]) for e in events] == [
        (1, 503, "retry", "overload"),
        (2, 503, "retry", "overload"),
        (3, 200, "success", "ok"),
    ]
    assert upstream.hits("/items") == 3


@pytest.mark.integration
def test_subprocess_get_404_is_exit_1(upstream):
    """A 404 still prints its body, then one line naming the status; exit 1."""
    upstream.script("/missing", Reply(404, body=b"no such thing"))
    url = upstream.url("/missing?token=s3cret")
    done = _run("get", url)
    assert (done.returncode, done.stdout) == (1, "no such thing")
    events, others = _split_stderr(done.stderr)
    assert [(e["decision"], e["reason"]) for e in events] == [("give_up", "not_retryable")]
    assert others == [
        f"resilient-session: GET {upstream.url('/missing?token=REDACTED')}: "
        "HTTP 404 Not Found (1 try)"
    ]


@pytest.mark.integration
def test_subprocess_get_refused_is_exit_1(fast_config):
    """A refused connection is retried 4 times, then one line names it; exit 1, no traceback."""
    url = refused_url("/")
    done = _run("get", "--config", str(fast_config), url)
    assert (done.returncode, done.stdout) == (1, "")
    events, others = _split_stderr(done.stderr)
    assert [e["error"] for e in events] == ["ConnectionError"] * 4
    assert [e["decision"] for e in events] == ["retry", "retry", "retry", "give_up"]
    assert len(others) == 1
    assert others[0].startswith(f"resilient-session: GET {url}: ConnectionError: ")
    assert others[0].endswith("(4 tries)")
    assert "Connection refused" in others[0]


@pytest.mark.integration
def test_subprocess_post_with_key_headers_and_data(upstream, fast_config):
    """-X POST -d with an Idempotency-Key header is retried after a 502 and sends the body."""
    upstream.script("/pay", Reply(502), Reply(201, body=b"created"))
    done = _run(
        "get",
        "--config",
        str(fast_config),
        "-X",
        "post",
        "-H",
        "Idempotency-Key: k-42",
        "-H",
        "Content-Type: application/json",
        "-d",
        '{"amount": 5}',
        upstream.url("/pay"),
    )
    assert (done.returncode, done.stdout) == (0, "created")
    hits = upstream.received("/pay")
    assert [(hit.method, hit.body, hit.header("Idempotency-Key")) for hit in hits] == [
        ("POST", b'{"amount": 5}', "k-42"),
        ("POST", b'{"amount": 5}', "k-42"),
    ]
    assert hits[0].header("Content-Type") == "application/json"


@pytest.mark.integration
def test_subprocess_data_alone_means_post_sent_once(upstream, fast_config):
    """-d without -X is a POST; without an Idempotency-Key its 502 is not retried: exit 1."""
    upstream.script("/orders", Reply(502), Reply(201))
    done = _run("get", "--config", str(fast_config), "-d", "x=1", upstream.url("/orders"))
    assert done.returncode == 1
    events, others = _split_stderr(done.stderr)
    assert [(e["method"], e["decision"], e["reason"]) for e in events] == [
        ("POST", "give_up", "not_idempotent")
    ]
    assert others[0].endswith(": HTTP 502 Bad Gateway (1 try)")
    assert upstream.hits("/orders") == 1


@pytest.mark.integration
def test_subprocess_deadline_cuts_a_hang(upstream):
    """--deadline 0.3 against a hanging upstream ends in DeadlineExceeded within a second."""
    upstream.script("/slow", Hang(5.0))
    done = _run("get", "--deadline", "0.3", upstream.url("/slow"))
    assert (done.returncode, done.stdout) == (1, "")
    events, others = _split_stderr(done.stderr)
    assert [(e["error"], e["decision"], e["reason"]) for e in events] == [
        ("DeadlineExceeded", "give_up", "deadline")
    ]
    # deadline= starts its clock before requests prepares the request, the event's total
    # after: the try ends a few microseconds short of 0.3 s of total when the timer is punctual.
    assert 0.29 <= events[0]["total"] < 1.0
    assert len(others) == 1
    assert others[0].startswith(f"resilient-session: GET {upstream.url('/slow')}: DeadlineExceeded")


@pytest.mark.integration
def test_subprocess_configured_default_deadline_applies(upstream, tmp_path):
    """Without --deadline, the config's deadline.default of 0.3 s still cuts a hanging call."""
    path = tmp_path / "deadline.yaml"
    path.write_text("defaults:\n  deadline: {default: 0.3}\n", encoding="utf-8")
    upstream.script("/slow", Hang(5.0))
    done = _run("get", "--config", str(path), upstream.url("/slow"))
    assert done.returncode == 1
    events, others = _split_stderr(done.stderr)
    assert [(e["error"], e["reason"]) for e in events] == [("DeadlineExceeded", "deadline")]
    assert 0.3 <= events[0]["total"] < 1.0
    sent = upstream.received("/slow")[0].header("X-Request-Timeout-Ms")
    assert sent is not None
    assert 200 < int(sent) < 300
    assert len(others) == 1


@pytest.mark.integration
def test_subprocess_bad_config_is_exit_2(tmp_path):
    """A config file with bad YAML: exit 2 and exactly one stderr line, no traceback."""
    path = tmp_path / "bad.yaml"
    path.write_text("defaults: [\n", encoding="utf-8")
    done = _run("get", "--config", str(path), "http://127.0.0.1:1/")
    assert (done.returncode, done.stdout) == (2, "")
    assert f"{path}:2:1: not valid YAML" in _one_error_line(done.stderr)


@pytest.mark.integration
def test_subprocess_unknown_flag_is_exit_2():
    """python -m resilient_session with an unknown flag: exit 2, one line, no usage block."""
    done = _run("stats", "--frobnicate")
    assert (done.returncode, done.stdout) == (2, "")
    assert _one_error_line(done.stderr) == (
        "resilient-session: unrecognized arguments: --frobnicate (see resilient-session --help)"
    )


@pytest.mark.integration
def test_subprocess_stats_from_a_pipe():
    """Event lines piped into stats give the per-host table; exit 0."""
    done = _run("stats", stdin=RECORDED.read_text(encoding="utf-8"))
    assert (done.returncode, done.stderr) == (0, "")
    rows = [line.split() for line in done.stdout.splitlines()[1:3]]
    assert [row[:4] for row in rows] == [
        ["http://127.0.0.1:8080", "5", "8", "1.60"],
        ["http://127.0.0.1:9090", "5", "6", "1.20"],
    ]
