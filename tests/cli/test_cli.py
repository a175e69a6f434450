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
from resilient_session.testing.upstream import FlakyUpstream, Hang, Reply, refused_url

RECORDED = Path(__file__).resolve().parents[1] / "data" / "events.jsonl"

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
        (["-H", "NoColon"], "bad header #1: no ':' after the name; use -H 'Name: value'"),
        (["-H", "Bad Name: x"], "bad header name 'Bad Name': use -H 'Name: value'"),
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

    monkeypatch.setattr("resilient_session.cli.stats.StatsAggregator.feed", broken)
    assert main(["stats", str(RECORDED)]) == 1
    assert _one_error_line(capsys.readouterr().err) == (
        "resilient-session: internal error: RuntimeError: boom"
    )


# -- check ---------------------------------------------------------------------------------------


def test_check_valid_file(capsys, config_file):
    """A valid file prints an ok line with its 2 host entries, then its state backend."""
    assert main(["check", str(config_file)]) == 0
    assert capsys.readouterr().out == (
        f"{config_file}: ok (2 host entries)\n"
        "state: memory (each process keeps its own breakers, budgets and throttles)\n"
    )


def test_check_shows_the_redis_state_backend_without_its_password(capsys, tmp_path):
    """A file selecting the redis backend shows its address, prefix and timings, never the
    password in its URL, both plain and above a host's policy."""
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "state:\n  backend: redis\n  url: redis://:s3cret@10.0.0.7:6380/2\n"
        "  key_prefix: 'orders:'\n  timeout_ms: 15\n  sync_interval_ms: 50\n",
        encoding="utf-8",
    )
    line = (
        "state: redis at redis://10.0.0.7:6380/2, key prefix 'orders:', timeout 15 ms, "
        "sync every 50 ms (breakers, budgets and throttles shared by every process using it)"
    )
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok (0 host entries)\n{line}\n"
    assert main(["check", str(path), "--host", "api.example.com"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] == f"# {line}"
    assert "s3cret" not in out
    assert yaml.safe_load(out)["breaker"]["failure_threshold"] == 20


@pytest.mark.parametrize(
    ("state", "where"),
    [
        (
            "  mode: cluster\n  url: rediss://:s3cret@10.0.0.7:7000\n",
            "redis cluster from rediss://10.0.0.7:7000",
        ),
        (
            "  mode: sentinel\n  url: redis://:s3cret@orders/0\n  service_name: orders\n"
            "  sentinels: [[10.0.0.7, 26379], [10.0.0.8, 26379]]\n  sentinel_password: s3cret\n",
            "redis master 'orders' named by sentinels 10.0.0.7:26379, 10.0.0.8:26379",
        ),
    ],
)
def test_check_names_a_cluster_or_the_sentinels_without_a_password(capsys, tmp_path, state, where):
    path = tmp_path / "fleet.yaml"
    path.write_text(f"state:\n  backend: redis\n{state}", encoding="utf-8")
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith(f"state: {where}, key prefix 'resilient-session:', ")
    assert "s3cret" not in out


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
        ("db.internal.example:8443", 2, 20),
        ("https://db.internal.example:8443", 2, 20),
        ("db.internal.example", 3, 20),
        ("API.example.com:443", 3, 3),
        ("[::1]:8080", 3, 20),
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


@pytest.mark.parametrize("host", ["a:b:c", "h:0", "h:70000", "h/path", "h?x=1", "ftp://h/"])
def test_check_bad_host_is_exit_2(capsys, config_file, host):
    """A --host that is not host, host:port, [ipv6]:port or an http(s) URL: exit 2."""
    assert main(["check", str(config_file), "--host", host]) == 2
    assert f"bad --host {host!r}" in _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.example.com/v1/items?x=1", "api.example.com:443"),
        ("http://API.example.com/v1/items#top", "api.example.com:80"),
        ("https://db.internal.example:8443/health", "db.internal.example:8443"),
        ("http://[::1]:8080/x?y", "[::1]:8080"),
    ],
)
def test_check_host_accepts_a_url_with_path_and_query(capsys, config_file, url, shown):
    """A URL's path, query and fragment are ignored: its host and port pick the policy."""
    assert main(["check", str(config_file), "--host", url]) == 0
    assert (
        capsys.readouterr()
        .out.splitlines()[0]
        .startswith(f"# {config_file}: ok; policy for {shown} (")
    )


@pytest.mark.parametrize("host", ["user@h", "https://user:hunter2@api.example.com/v1"])
def test_check_host_with_userinfo_is_refused_without_echoing_it(capsys, config_file, host):
    """Userinfo may be a credential: refused, and neither it nor the host is printed back."""
    assert main(["check", str(config_file), "--host", host]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == "resilient-session: bad --host: give it without user:password@"


def test_check_reports_every_error_of_the_file(capsys, tmp_path):
    """Two typos and a bad value: exit 2, the file named once, then one line per error."""
    path = tmp_path / "typos.yaml"
    path.write_text(
        "defaults:\n  retry: {max_atempts: 2, backoff_cap: 0}\n  budgte: {}\n", encoding="utf-8"
    )
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines() == [
        f"resilient-session: {path}: 3 errors:",
        "  defaults.retry.max_atempts: unknown key (did you mean max_attempts?)",
        "  defaults.retry.backoff_cap: expected float > 0.0, got 0",
        "  defaults.budgte: unknown key (did you mean budget?)",
    ]


# -- version ---------------------------------------------------------------------------------------


def test_version_matches_the_installed_package(capsys):
    """--version prints the installed distribution's version, as __version__ holds it."""
    from importlib.metadata import version

    import resilient_session

    assert resilient_session.__version__ == version("resilient-session")
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"resilient-session {resilient_session.__version__}\n"


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
        "refused",
        "retries",
        "hedges",
        "ok",
        "give-ups",
        "trips",
        "p50",
        "total",
        "p99",
        "total",
    ]
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in lines[1:3]}
    # p99 1.0 reads 0.990: the histogram reports within 1 % (docs/events.md).
    assert rows == {
        "http://127.0.0.1:8080": "5 8 1.60 0 3 0 2 3 0 0.050 s 0.402 s",
        "http://127.0.0.1:9090": "5 4 0.80 2 1 0 1 2 1 0.020 s 0.990 s",
    }
    assert "  http://127.0.0.1:9090  breaker_open=1 deadline=1" in lines
    assert lines[lines.index("refused (fail-fasts) by reason") + 1] == (
        "  http://127.0.0.1:9090  breaker_open=2"
    )
    assert "  http://127.0.0.1:9090  closed->open=1 half_open->closed=1 open->half_open=1" in lines
    assert lines[-1] == (
        "21 lines read, 17 used, 4 skipped (2 not JSON, 0 too long, 1 other events, "
        "1 malformed); p50/p99 of each call's final try, within 1%"
    )


def test_stats_counts_state_degraded_events(capsys, tmp_path):
    """Each worker's state.degraded and state.restored lines are counted, in the table's
    notes and in --json."""
    path = tmp_path / "fleet.jsonl"
    degraded = '{"event": "state.degraded", "backend": "redis", "url": "redis://r:6379/0"}'
    restored = '{"event": "state.restored", "backend": "redis", "degraded_for": 5.1}'
    path.write_text("\n".join([degraded, degraded, degraded, restored, restored]) + "\n")
    assert main(["stats", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "shared state (redis backend): 3 times degraded to local state, 2 times restored" in (
        lines
    )
    assert main(["stats", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == {"degraded": 3, "restored": 2}


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
    """No input at all is bad input: one line on stderr naming stdin and 0 lines read, exit 2."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["stats", "-"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        "resilient-session: stdin: no event found in the input (0 lines read: 0 not JSON,"
    )
    assert captured.err.count("\n") == 1


def _try_line(host: str = "http://127.0.0.1:8080", **fields: Any) -> str:
    event = {"event": "http.try", "host": host, "attempt": 1, "decision": "success"}
    return json.dumps({**event, "reason": "ok", "total": 0.1, **fields})


def test_stats_counts_past_hostile_lines(capsys, tmp_path):
    """Wrong-typed fields, deep nesting and a 1 MB line are skipped and counted; the good
    line still makes its row and the exit code is 0."""
    path = tmp_path / "events.jsonl"
    hostile = [
        _try_line(decision=[]),
        _try_line(reason={}),
        '{"event": "breaker.transition", "host": "h", "from": [], "to": {}}',
        _try_line(total=10**400),
        "[" * 20_000 + "]" * 20_000,
        "x" * 1_000_000,
        _try_line(),
    ]
    path.write_text("\n".join(hostile) + "\n", encoding="utf-8")
    assert main(["stats", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:4] == ["http://127.0.0.1:8080", "1", "1", "1.00"]
    assert out[-1].startswith(
        "7 lines read, 1 used, 6 skipped (1 not JSON, 1 too long, 0 other events, 4 malformed)"
    )


HOSTILE_HOST = "http://a\x1b]0;owned\x07\x1b[2J\r\nforged\u202eevil\ud800:80"


def test_stats_text_escapes_hosts_from_the_input(capsys, monkeypatch):
    """A host carrying escape sequences, CR LF, a bidi override and a lone surrogate is printed
    escaped: no control character reaches the terminal, and the row stays one line."""
    lines = [
        _try_line(HOSTILE_HOST),
        _try_line(HOSTILE_HOST, decision="give_up", reason="max_attempts"),
        json.dumps(
            {"event": "breaker.transition", "host": HOSTILE_HOST, "from": "closed", "to": "open"}
        ),
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines)))
    assert main(["stats"]) == 0
    out = capsys.readouterr().out
    shown = "http://a\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x0aforged\\u202eevil\\ud800:80"
    assert out.splitlines()[1].split()[0] == shown
    assert f"  {shown}  max_attempts=1" in out.splitlines()
    assert f"  {shown}  closed->open=1" in out.splitlines()
    assert not any(ord(ch) < 0x20 and ch != "\n" for ch in out)
    assert "\u202e" not in out


def test_stats_json_is_ascii_and_keeps_the_host_exact(capsys, monkeypatch):
    """--json writes every control, bidi and surrogate character as a \\u escape: the output
    is plain ASCII, and decoding it gives the host back exactly."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(_try_line(HOSTILE_HOST)))
    assert main(["stats", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.isascii()
    assert "\\u001b]0;owned\\u0007" in out
    assert list(json.loads(out)["hosts"]) == [HOSTILE_HOST]


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
    # The deadline starts in session.request, `total` only once the request is prepared: in a
    # fresh process the first prepare (lazy imports) takes a few milliseconds of the 0.3 s.
    assert 0.25 <= events[0]["total"] < 1.0
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
    # As for --deadline: the default spans the call from session.request, `total` starts once
    # the request is prepared, a few milliseconds later in a fresh process.
    assert 0.25 <= events[0]["total"] < 1.0
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
        ["http://127.0.0.1:9090", "5", "4", "0.80"],
    ]


def test_check_host_never_echoes_a_secret_and_a_bad_bracket_is_usage(capsys, config_file):
    """A bad --host is shown redacted, and an unclosed [ipv6 bracket is exit 2, not internal."""
    assert main(["check", str(config_file), "--host", "https://h:99999/?token=SECRET"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "SECRET" not in line
    assert "token=REDACTED" in line
    assert main(["check", str(config_file), "--host", "[::1"]) == 2
    assert _one_error_line(capsys.readouterr().err).startswith("resilient-session: bad --host")


ROUTED_CONFIG = """\
hosts:
  api.example.com:
    breaker: {failure_threshold: 3}
    routes:
      "/v1/payments/*": {retry: {max_attempts: 1}}
      "/search/*": {}
"""


@pytest.mark.parametrize(
    ("host", "entry", "attempts"),
    [
        (
            "https://api.example.com/v1/payments/7?x=1",
            'hosts."api.example.com".routes."/v1/payments/*" over hosts."api.example.com" over '
            "defaults",
            1,
        ),
        ("https://api.example.com/other", 'hosts."api.example.com" over defaults', 4),
        ("api.example.com", 'hosts."api.example.com" over defaults', 4),
    ],
)
def test_check_host_shows_the_policy_of_the_route_a_url_is_in(
    capsys, tmp_path, host, entry, attempts
):
    """A URL in one of the host's routes gets that route's policy, named as such; a host
    with routes shown without one lists them."""
    path = tmp_path / "routed.yaml"
    path.write_text(ROUTED_CONFIG, encoding="utf-8")
    assert main(["check", str(path), "--host", host]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"# {path}: ok; policy for api.example.com:443 ({entry})"
    listed = (
        "# routes of its own: /v1/payments/*, /search/* (--host with a URL in one shows its policy)"
    )
    assert (listed in out.splitlines()) == (attempts != 1)
    policy = yaml.safe_load(out)
    assert (policy["retry"]["max_attempts"], policy["breaker"]["failure_threshold"]) == (
        attempts,
        3,
    )
