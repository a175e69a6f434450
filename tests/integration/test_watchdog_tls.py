"""The watchdog over TLS: a healthy call keeps its pooled TLS connection, trickled headers
or a trickled trailer after a completed handshake are cut at the deadline."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from resilient_session import DeadlineExceeded

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10.0

    def log_message(self, format: str, *args: object) -> None:
        """Silent."""

    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, _TLSServer)
        with server.lock:
            server.connections.add(self.client_address)
        if self.path == "/trickle":
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
            for index in range(len(head)):
                if server.stopping.wait(0.3):
                    return
                self.wfile.write(head[index : index + 1])
            self.wfile.write(b"ok")
            return
        if self.path == "/trailer":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            self.wfile.write(b"2\r\nok\r\n0\r\nX-Trailer: ")
            for _ in range(40):  # 12 s of trailer
                if server.stopping.wait(0.3):
                    return
                self.wfile.write(b"a")
            self.wfile.write(b"\r\n\r\n")
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.connections: set[tuple[str, int]] = set()

    def server_bind(self) -> None:
        # No FQDN lookup for loopback.
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[_TLSServer, str]]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    openssl = shutil.which("openssl")
    assert openssl is not None
    subprocess.run(  # noqa: S603 - fixed arguments, a throwaway certificate
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = _TLSServer(context)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server, str(cert)
    server.stopping.set()
    server.shutdown()
    server.server_close()
    thread.join(5.0)


def test_a_healthy_tls_call_keeps_its_pooled_connection(tls_server, make_session):
    """Calls with a deadline over TLS, one made after an earlier deadline passed, share one
    connection: the watchdog never shut a pooled TLS socket down."""
    server, cert = tls_server
    session = make_session()
    url = f"https://127.0.0.1:{server.server_address[1]}/ok"

    first = session.get(url, deadline=0.3, verify=cert)
    time.sleep(0.5)
    second = session.get(url, deadline=0.3, verify=cert)

    assert [first.content, second.content] == [b"ok", b"ok"]
    assert len(server.connections) == 1


def test_trickled_headers_over_tls_are_cut_at_the_deadline(tls_server, make_session):
    """On a pooled TLS connection (the watch armed by the request, not the connect), headers
    one byte every 0.3 s are cut at the 1 s deadline."""
    server, cert = tls_server
    session = make_session()
    base = f"https://127.0.0.1:{server.server_address[1]}"
    assert session.get(base + "/ok", verify=cert).content == b"ok"  # pools the connection

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        session.get(base + "/trickle", deadline=1.0, verify=cert)
    elapsed = time.monotonic() - started

    assert 0.95 <= elapsed < 1.5
    assert len(server.connections) == 1


def test_a_trickled_trailer_over_tls_is_cut_at_the_deadline(tls_server, make_session):
    """A chunked body's trailer, one byte every 0.3 s over TLS, ends the call at its 1 s
    deadline with DeadlineExceeded, not 12 s later with a 200; the next call connects anew."""
    server, cert = tls_server
    session = make_session(retry={"max_attempts": 1})
    base = f"https://127.0.0.1:{server.server_address[1]}"

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="while reading the body of 200"):
        session.get(base + "/trailer", deadline=1.0, verify=cert)
    elapsed = time.monotonic() - started
    after = session.get(base + "/ok", deadline=5.0, verify=cert)

    assert 0.95 <= elapsed < 1.6
    assert after.content == b"ok"
    assert len(server.connections) == 2
