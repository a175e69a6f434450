"""``get`` prints no secret and no terminal control text, whatever it was given or received."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from resilient_session.cli import _tries, main
from resilient_session.testing.upstream import LOOPBACK, refused_url

SECRET_URL = "http://user:hunter2@127.0.0.1:{port}/p?token=tk-9&page=2#access_token=fr-9"  # noqa: S105
SECRETS = ("hunter2", "tk-9", "fr-9")


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def test_malformed_ipv6_url_is_a_usage_error(capsys):
    """An unclosed IPv6 bracket is bad usage (exit 2, one line), not an internal error."""
    assert main(["get", "http://[::1/"]) == 2
    assert _one_error_line(capsys.readouterr().err) == (
        "resilient-session: bad URL 'http://[::1/': Invalid IPv6 URL"
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "ftp://user:hunter2@h.test/?token=tk-9#fr-9",
            "bad URL 'ftp://h.test/?token=REDACTED': give an absolute http:// or https:// URL",
        ),
        (
            "http://user:hunter2@h.test:99999/?token=tk-9",
            "bad URL 'http://h.test:99999/?token=REDACTED': Port out of range 0-65535",
        ),
        (
            "http://user:hunter2@[::1/?token=tk-9#fr-9",
            "bad URL 'http://[::1/?token=REDACTED': Invalid IPv6 URL",
        ),
    ],
)
def test_bad_url_is_printed_redacted(capsys, url, expected):
    """A bad URL is named without its userinfo, secret values or fragment."""
    assert main(["get", url]) == 2
    assert _one_error_line(capsys.readouterr().err) == f"resilient-session: {expected}"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Authorization Bearer tk-9", "bad header #2: no ':' after the name; use -H 'Name: value'"),
        ("X Api Key: tk-9", "bad header name 'X Api Key': use -H 'Name: value'"),
        ("X-\x1b[2J: tk-9", "bad header name 'X-\\x1b[2J': use -H 'Name: value'"),
    ],
)
def test_bad_header_never_echoes_its_value(capsys, header, expected):
    """A malformed -H is named by its position or name; its value is never printed."""
    assert main(["get", "-H", "Accept: */*", "-H", header, "http://127.0.0.1:1/"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == f"resilient-session: {expected}"
    assert _leaks(line) == []


@pytest.mark.integration
def test_failed_request_line_is_redacted(capsys):
    """A refused connection prints one error line without the URL's secrets."""
    port = refused_url("/").rsplit(":", 1)[1].rstrip("/")
    config_free = ["get", "--deadline", "5", SECRET_URL.format(port=port)]
    assert main(config_free) == 1
    err = capsys.readouterr().err
    line = err.splitlines()[-1]
    assert line.startswith(
        f"resilient-session: GET http://127.0.0.1:{port}/p?token=REDACTED&page=2: ConnectionError: "
    )
    assert "Connection refused" in line
    assert _leaks(err) == []


@contextlib.contextmanager
def _raw_upstream(head: bytes) -> Iterator[int]:
    """A one-shot server on loopback that answers the first request with *head*, as is."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((LOOPBACK, 0))
    listener.listen(1)
    listener.settimeout(10)

    def serve() -> None:
        with contextlib.suppress(OSError):
            connection, _ = listener.accept()
            with connection:
                connection.settimeout(10)
                received = b""
                while b"\r\n\r\n" not in received and len(received) < 65536:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    received += chunk
                connection.sendall(head)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()
        thread.join(10)


@pytest.mark.integration
def test_status_line_escapes_the_reason_phrase(capsys):
    """An upstream's reason phrase with escape sequences is printed with them escaped."""
    head = (
        b"HTTP/1.1 418 Tea\x1b]0;pwned\x07\x9b2J\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    with _raw_upstream(head) as port:
        assert main(["get", SECRET_URL.format(port=port)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"resilient-session: GET http://127.0.0.1:{port}/p?token=REDACTED&page=2: "
        "HTTP 418 Tea\\x1b]0;pwned\\x07\\x9b2J (1 try)"
    )
    assert _leaks(err) == []


def test_internal_error_line_is_redacted(capsys, monkeypatch):
    """Even an unexpected error in get prints its text redacted, on one line."""

    def broken(self, method, url, **kwargs):
        raise RuntimeError(f"boom for {url}")

    monkeypatch.setattr("resilient_session.cli.ResilientSession.request", broken)
    assert main(["get", SECRET_URL.format(port=1)]) == 1
    assert _one_error_line(capsys.readouterr().err) == (
        "resilient-session: internal error: RuntimeError: "
        "boom for http://127.0.0.1:1/p?token=REDACTED&page=2"
    )


def _health(tries: int, refused: int) -> SimpleNamespace:
    return SimpleNamespace(tries=tries, refused=refused)


@pytest.mark.parametrize(
    ("hosts", "shown"),
    [
        ([_health(1, 0)], " (1 try)"),
        ([_health(3, 0)], " (3 tries)"),
        ([_health(1, 2)], " (1 try, 2 refused)"),
        ([_health(0, 1)], " (0 tries, 1 refused)"),
        ([_health(2, 0), _health(1, 1)], " (3 tries, 1 refused)"),
    ],
)
def test_tries_counts_sent_and_refused_apart(hosts, shown):
    """Tries sent toward the upstream and tries refused locally are counted apart."""
    session = SimpleNamespace(health=lambda: {str(i): h for i, h in enumerate(hosts)})
    assert _tries(session) == shown  # type: ignore[arg-type]
