"""No secret of a URL reaches an event, a message the library built, or the command line.

Each test fails a call in one way the library knows, against real loopback sockets, with a URL
carrying userinfo, secret query and path-parameter values and a fragment, then scans every JSON
event line, every exception the library built (str and repr) and the CLI's stdout and stderr
for the same failure. Exceptions of requests' own, re-raised unchanged, keep requests' text
(docs/events.md, "Redaction"), as does the original a library exception keeps unprinted: they
are set apart, never scanned here (test_secret_chain.py prints whole tracebacks).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from resilient_session import (
    CircuitOpenError,
    DeadlineExceeded,
    ResilientSession,
    log_json_lines,
)
from resilient_session.cli import main
from resilient_session.testing.upstream import Drip, FlakyUpstream, Hang, Reply, refused_url
from tests.integration.stall import full_backlog

pytestmark = pytest.mark.integration

PATH = "/p;jsessionid=js-s3cret/items"
QUERY = "page=2&token=tok-s3cret&X-Amz-Signature=amz-s3cret;sig=sig-s3cret"
FRAGMENT = "access_token=frag-s3cret"
SECRETS = (
    "hunter2",
    "tok-s3cret",
    "amz-s3cret",
    "sig-s3cret",
    "frag-s3cret",
    "js-s3cret",
    "proxy-s3cret",
    # requests turns user:password@ into a Basic Authorization header.
    base64.b64encode(b"user:hunter2").decode(),
)
FAST = {"retry": {"backoff_base": 0.01, "backoff_cap": 0.05}}


def secret_url(origin: str) -> str:
    """*origin* (``scheme://host:port``) with userinfo, secret values and a fragment."""
    scheme, _, hostport = origin.partition("://")
    return f"{scheme}://user:hunter2@{hostport}{PATH}?{QUERY}#{FRAGMENT}"


def leaks(*texts: str) -> list[tuple[str, str]]:
    """Every (secret, text) where the secret shows."""
    return [(secret, text) for text in texts for secret in SECRETS if secret in text]


class Failure:
    """What one failed call left behind: event lines, the exceptions the library built, and
    the exceptions of requests' own that it re-raised unchanged."""

    def __init__(self) -> None:
        self.events = io.StringIO()
        self.built: list[BaseException] = []
        self.foreign: list[BaseException] = []
        self.response: requests.Response | None = None

    def run(self, session: ResilientSession, url: str, **kwargs: Any) -> None:
        log_json_lines(self.events)
        try:
            self.response = session.get(url, **kwargs)
        except requests.RequestException as exc:
            chain: BaseException | None = exc
            while chain is not None:
                if isinstance(chain, DeadlineExceeded | CircuitOpenError):
                    self.built.append(chain)
                    chain = chain.original
                else:
                    self.foreign.append(chain)
                    chain = chain.__cause__

    def lines(self) -> list[str]:
        return self.events.getvalue().splitlines()

    def texts(self) -> list[str]:
        """Everything scanned: each event line, and str and repr of each built exception."""
        return [*self.lines(), *(str(e) for e in self.built), *(repr(e) for e in self.built)]


def session_with(**sections: dict[str, Any]) -> ResilientSession:
    defaults: dict[str, Any] = {name: dict(values) for name, values in FAST.items()}
    for name, values in sections.items():
        defaults[name] = {**defaults.get(name, {}), **values}
    return ResilientSession({"defaults": defaults})


def cli(capsys: pytest.CaptureFixture[str], tmp_path: Path, url: str, *args: str, **sections: Any):
    """Run ``get`` for *url* with a config of *sections*; returns (exit code, stdout + stderr)."""
    config = tmp_path / "scan.yaml"
    defaults = {**FAST, **sections}
    config.write_text(yaml.safe_dump({"defaults": defaults}), encoding="utf-8")
    code = main(["get", "--config", str(config), *args, url])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def assert_clean(failure: Failure, cli_output: str) -> None:
    assert failure.lines(), "no event was logged"
    assert leaks(*failure.texts(), cli_output) == []


def test_deadline_at_connect(capsys, tmp_path):
    """A connect cut by the deadline: the library's DeadlineExceeded holds urllib3's text,
    redacted; events and the CLI line hold no secret."""
    with full_backlog() as origin, session_with() as session:
        failure = Failure()
        failure.run(session, secret_url(origin), deadline=0.3)
        code, output = cli(capsys, tmp_path, secret_url(origin), "--deadline", "0.3")
    (exceeded, cause) = (failure.built[0], failure.foreign[0])
    assert isinstance(exceeded, DeadlineExceeded)
    assert isinstance(cause, requests.ConnectTimeout)
    assert "ran out during try 1" in str(exceeded)
    assert f"url: {PATH.replace('js-s3cret', 'REDACTED')}?page=2&token=REDACTED" in str(exceeded)
    assert code == 1
    assert "DeadlineExceeded" in output
    assert_clean(failure, output)


def test_deadline_at_read(capsys, tmp_path):
    """An upstream that accepts and never answers, cut by the deadline: nothing leaks."""
    with FlakyUpstream() as upstream, session_with() as session:
        upstream.script(PATH, Hang(5.0), cycle=True)
        failure = Failure()
        failure.run(session, secret_url(upstream.base_url), deadline=0.3)
        code, output = cli(capsys, tmp_path, secret_url(upstream.base_url), "--deadline", "0.3")
    assert [type(e) for e in failure.built] == [DeadlineExceeded]
    assert code == 1
    assert_clean(failure, output)


def test_deadline_in_the_body(capsys, tmp_path):
    """A body that drips past the deadline: the library's message names the URL redacted."""
    with FlakyUpstream() as upstream, session_with() as session:
        upstream.script(PATH, Drip(total_bytes=1000, interval=0.05), cycle=True)
        failure = Failure()
        failure.run(session, secret_url(upstream.base_url), deadline=0.4)
        code, output = cli(capsys, tmp_path, secret_url(upstream.base_url), "--deadline", "0.4")
        origin = upstream.base_url
    assert [str(e) for e in failure.built] == [
        f"deadline ran out while reading the body of 200 from {origin}"
        "/p;jsessionid=REDACTED/items?page=2&token=REDACTED&X-Amz-Signature=REDACTED;sig=REDACTED"
    ]
    assert code == 1
    assert_clean(failure, output)


def test_breaker_open(capsys, tmp_path):
    """A refused host opens its breaker; the next call's CircuitOpenError and the transition
    events name the host only; nor does the CLI's refused-connection line leak."""
    origin = refused_url("/").rstrip("/")
    breaker = {"failure_threshold": 1}
    with session_with(retry={"max_attempts": 1}, breaker=breaker) as session:
        failure = Failure()
        failure.run(session, secret_url(origin))
        failure.run(session, secret_url(origin))
    code, output = cli(capsys, tmp_path, secret_url(origin), breaker=breaker)
    assert [type(e) for e in failure.built] == [CircuitOpenError]
    assert [type(e) for e in failure.foreign] == [requests.ConnectionError]
    assert '"event":"breaker.transition"' in failure.events.getvalue()
    assert code == 1
    assert "ConnectionError" in output
    assert_clean(failure, output)


def test_budget_exhausted(capsys, tmp_path):
    """A 503 retried until the budget has no token: events and the status line leak nothing."""
    budget = {"ratio": 0.0, "min_per_second": 0.0, "max_tokens": 1}
    with FlakyUpstream() as upstream, session_with(budget=budget) as session:
        upstream.script(PATH, Reply(503), cycle=True)
        failure = Failure()
        failure.run(session, secret_url(upstream.base_url))
        code, output = cli(capsys, tmp_path, secret_url(upstream.base_url), budget=budget)
    assert failure.response is not None
    assert failure.response.status_code == 503
    assert '"reason":"budget_exhausted"' in failure.events.getvalue()
    assert code == 1
    assert "HTTP 503 Service Unavailable (2 tries)" in output
    assert_clean(failure, output)


def test_proxy_refused(capsys, tmp_path, monkeypatch):
    """A proxy on a closed port (with its own password): requests' ProxyError is re-raised as
    it is, and events and the CLI line leak neither the URL's secrets nor the proxy's."""
    proxy = refused_url("/").rstrip("/").replace("http://", "http://puser:proxy-s3cret@")
    target = secret_url("http://upstream.test:8080")
    with session_with(retry={"max_attempts": 2}) as session:
        failure = Failure()
        failure.run(session, target, proxies={"http": proxy})
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("http_proxy", proxy)
    code, output = cli(capsys, tmp_path, target, retry={"max_attempts": 2})
    assert [type(e) for e in failure.foreign] == [requests.exceptions.ProxyError]
    assert failure.built == []
    assert code == 1
    assert "ProxyError" in output
    assert_clean(failure, output)


def test_tls_error(capsys, tmp_path):
    """https to a plain-HTTP server: requests' SSLError is re-raised as it is; events and the
    CLI line leak nothing."""
    with FlakyUpstream() as upstream, session_with() as session:
        origin = upstream.base_url.replace("http://", "https://")
        failure = Failure()
        failure.run(session, secret_url(origin))
        code, output = cli(capsys, tmp_path, secret_url(origin))
    assert [type(e) for e in failure.foreign] == [requests.exceptions.SSLError]
    assert code == 1
    assert "SSLError" in output
    assert_clean(failure, output)
