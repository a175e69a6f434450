"""One Redis command over a fresh loopback connection, for the test servers to ask theirs how
they are (``CLUSTER NODES``, ``ROLE``, ``SENTINEL ...``) without redis-py, an extra."""

from __future__ import annotations

import socket
import ssl
from typing import IO, Any

# A reply's bulk strings and arrays are small here: a cluster's node table at most.
_MAX_BULK = 1 << 20
_MAX_ITEMS = 10_000


class ReplyError(RuntimeError):
    """The server answered with an error (``-ERR ...``)."""


def command(
    port: int,
    *args: str,
    timeout: float = 1.0,
    context: ssl.SSLContext | None = None,
    password: str | None = None,
    asking: bool = False,
) -> Any:
    """The reply of 127.0.0.1:*port* to *args*: a str, int, None or list of them; after
    ``AUTH`` with *password*, and after ``ASKING`` (a cluster node importing a slot serves
    its keys only so).

    Raises:
        OSError: no connection, or no whole reply within *timeout* seconds.
        ReplyError: an error reply.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        conn = context.wrap_socket(raw, server_hostname="127.0.0.1") if context else raw
        with conn, conn.makefile("rb") as reader:
            if password is not None:
                conn.sendall(_encode(("AUTH", password)))
                _read(reader)
            if asking:
                conn.sendall(_encode(("ASKING",)))
                _read(reader)
            conn.sendall(_encode(args))
            return _read(reader)


def _encode(args: tuple[str, ...]) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _read(reader: IO[bytes]) -> Any:
    line = reader.readline(_MAX_BULK)
    if not line.endswith(b"\r\n"):
        raise OSError("the connection closed mid-reply")
    kind, body = line[:1], line[1:-2].decode(errors="replace")
    if kind == b"+":
        return body
    if kind == b"-":
        raise ReplyError(body)
    if kind == b":":
        return int(body)
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None
        data = reader.read(min(size, _MAX_BULK) + 2)
        return data[:-2].decode(errors="replace")
    if kind == b"*":
        count = int(body)
        return None if count < 0 else [_read(reader) for _ in range(min(count, _MAX_ITEMS))]
    raise OSError(f"not a RESP2 reply: {line[:40]!r}")
