"""The canonical spelling of a host: what a ``hosts:`` rule is matched on and per-host state is
keyed by, so that two spellings the resolver takes for one address are one host."""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Final

# What inet_aton reads as an IPv4 address: 1 to 4 parts of decimal, octal (0...) or hex (0x...)
# digits. Checked first, as some inet_aton implementations (glibc's) also take anything after
# a space, which no host is.
_IPV4_SPELLING: Final = re.compile(r"[0-9a-fx]+(?:\.[0-9a-fx]+){0,3}")


def canonical_host(host: str) -> str:
    """*host* as a rule is matched on: lower case, without the trailing dot of a fully
    qualified name; an IPv4 address in any spelling the resolver takes (``127.1``,
    ``2130706433``, ``0x7f000001``, ``0177.0.0.1``) as its dotted quad; an IPv6 address
    compressed (``0:0::1`` is ``::1``).

    Example::

        canonical_host("LOCALHOST.") == "localhost"
        canonical_host("0x7f000001") == "127.0.0.1"
    """
    host = host.lower()
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host).compressed
        except ValueError:
            return host
    # A trailing dot names the same host from the root of the DNS tree: "localhost." is
    # "localhost", "127.0.0.1." is "127.0.0.1".
    name = host.rstrip(".") or host
    if _IPV4_SPELLING.fullmatch(name):
        try:
            # The platform's own parser: the one its resolver uses to read a numeric host.
            return socket.inet_ntoa(socket.inet_aton(name))
        except OSError:
            return name
    return name
