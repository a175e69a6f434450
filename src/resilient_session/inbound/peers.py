"""Which peers an inbound request's headers are adopted from: ``inbound.trusted_networks``.

The networks are read once, at load, into sorted ranges of integers per address family; a
request's peer is then one address parse and one bisection, whatever the number of networks.
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterable, Sequence
from typing import TypeVar

_N = TypeVar("_N", ipaddress.IPv4Network, ipaddress.IPv6Network)


class TrustedNetworks:
    """The networks whose peers are trusted; ``peer in networks`` for a peer address string.

    Args:
        networks: each an IPv4 or IPv6 network (or one address), as the config validated.
    """

    def __init__(self, networks: Iterable[str]) -> None:
        v4: list[ipaddress.IPv4Network] = []
        v6: list[ipaddress.IPv6Network] = []
        for text in networks:
            network = ipaddress.ip_network(text)
            if isinstance(network, ipaddress.IPv4Network):
                v4.append(network)
            else:
                v6.append(network)
        self._ranges = {4: _ranges(v4), 6: _ranges(v6)}

    def __contains__(self, peer: object) -> bool:
        """True when *peer* is an address inside one of the networks; an absent or malformed
        one (a host:port, a Unix socket path) is not."""
        if not isinstance(peer, str):
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        # A dual-stack server shows an IPv4 client as ::ffff:a.b.c.d.
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        starts, ends = self._ranges[address.version]
        value = int(address)
        index = bisect.bisect_right(starts, value) - 1
        return index >= 0 and value <= ends[index]


def _ranges(networks: Sequence[_N]) -> tuple[list[int], list[int]]:
    """The first and last address of each network, as integers, in order. Collapsed, the
    ranges do not overlap: the one starting last at or before an address is the only one that
    can hold it."""
    merged = sorted(ipaddress.collapse_addresses(networks))
    return (
        [int(network.network_address) for network in merged],
        [int(network.broadcast_address) for network in merged],
    )
