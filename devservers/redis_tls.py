"""A throwaway ``redis-server`` that speaks TLS only, on a free loopback port, with certificates
made for it by ``openssl`` in its own temporary directory: a CA, the server's certificate
(for 127.0.0.1 and localhost), a client certificate, and another CA that signed neither.

Example::

    with TlsRedisServer() as server:
        state = {"backend": "redis", "url": server.url,
                 "ssl_ca_certs": server.certificates.ca}
"""

from __future__ import annotations

import os
import secrets
import ssl
import subprocess
from dataclasses import dataclass
from typing import Final

from ._resp import ReplyError
from .redis_server import RedisPartMissing, RedisServer, program

_OPENSSL_WAIT: Final = 30.0
_KEY: Final = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
_DAYS: Final = "2"


@dataclass(frozen=True, slots=True)
class Certificates:
    """Paths of PEM files, each in the server's directory."""

    # The CA that signed the server's and the client's certificates.
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    # A CA that signed nothing here: a client that trusts it alone refuses the server.
    other_ca: str


def make_certificates(directory: str) -> Certificates:
    """Certificates for a loopback server and its client, written to *directory*.

    Raises:
        RedisPartMissing: ``openssl`` is not on PATH.
    """
    openssl = program("openssl")

    def path(name: str) -> str:
        return os.path.join(directory, name)

    def run(*args: str) -> None:
        subprocess.run(  # noqa: S603 - a fixed argument list, no shell
            [openssl, *args], check=True, capture_output=True, timeout=_OPENSSL_WAIT
        )

    for name in ("ca", "other-ca"):
        run(
            "req", "-x509", *_KEY, "-keyout", path(f"{name}.key"), "-out", path(f"{name}.crt"),
            "-days", _DAYS, "-subj", f"/CN=resilient-session test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
    for name, usage in (("server", "serverAuth"), ("client", "clientAuth")):
        with open(path(f"{name}.ext"), "w", encoding="ascii") as extensions:
            extensions.write(
                "basicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\n"
                f"extendedKeyUsage={usage}\n"
                "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "authorityKeyIdentifier=keyid\n"
                "subjectKeyIdentifier=hash\n"
            )
        run(
            "req", *_KEY, "-keyout", path(f"{name}.key"), "-out", path(f"{name}.csr"),
            "-subj", f"/CN={name}",
        )  # fmt: skip
        run(
            "x509", "-req", "-in", path(f"{name}.csr"), "-CA", path("ca.crt"),
            "-CAkey", path("ca.key"), "-set_serial", f"0x{secrets.token_hex(8)}",
            "-days", _DAYS, "-extfile", path(f"{name}.ext"), "-out", path(f"{name}.crt"),
        )  # fmt: skip
    return Certificates(
        ca=path("ca.crt"),
        server_cert=path("server.crt"),
        server_key=path("server.key"),
        client_cert=path("client.crt"),
        client_key=path("client.key"),
        other_ca=path("other-ca.crt"),
    )


class TlsRedisServer(RedisServer):
    """``redis-server --port 0 --tls-port N``: TLS only, as ``RedisServer`` otherwise.

    Args:
        client_certificates: the server asks every client for a certificate signed by its
            CA (``--tls-auth-clients yes``); otherwise it asks none.

    Raises:
        RedisPartMissing: ``openssl`` is not on PATH (and, from :meth:`start`, this
            ``redis-server`` was built without TLS).
    """

    def __init__(self, client_certificates: bool = False) -> None:
        super().__init__()
        self.certificates = make_certificates(self.directory)
        self.client_certificates = client_certificates
        self.url = f"rediss://127.0.0.1:{self.port}/0"

    def arguments(self) -> list[str]:
        made = self.certificates
        # Later options win: the plain port is closed.
        return [
            *super().arguments(),
            "--port", "0",
            "--tls-port", str(self.port),
            "--tls-cert-file", made.server_cert,
            "--tls-key-file", made.server_key,
            "--tls-ca-cert-file", made.ca,
            "--tls-auth-clients", "yes" if self.client_certificates else "no",
        ]  # fmt: skip

    def start(self) -> None:
        try:
            super().start()
        except RuntimeError as failed:
            if "tls" in str(failed).lower():
                raise RedisPartMissing(f"redis-server would not start with TLS: {failed}") from None
            raise

    def client_context(self) -> ssl.SSLContext:
        """Trusts the server's CA, and shows the client certificate."""
        context = ssl.create_default_context(cafile=self.certificates.ca)
        context.load_cert_chain(self.certificates.client_cert, self.certificates.client_key)
        return context

    def ping(self, timeout: float = 0.5) -> bool:
        try:
            return bool(self.command("PING", timeout=timeout) == "PONG")
        except (OSError, ReplyError):
            return False
