"""Whether a try's answer has reached its socket, read from the kernel (Linux's ``TCP_INFO``).

A first try can outlast its hedging delay with its answer already in: on a busy process its
thread waits for the interpreter or a core, not for the host. A hedge sent then is pure
load, on a process already behind, and a stall would send one for every try in flight. The
kernel knows when a socket last sent and last received data (``tcpi_last_data_sent`` and
``tcpi_last_data_recv``, milliseconds ago, in the kernel's ticks): data received after the
request's last byte went out means the host has answered. Where that cannot be read (another
system, a socket not connected yet, or both in the same tick), the answer is "not known",
and the hedge goes as before.
"""

from __future__ import annotations

import socket
import struct
import sys
from typing import Final

# struct tcp_info (linux/tcp.h): eight bytes of state, eight u32s, then the times.
_LAST_DATA_SENT: Final = 44
_LAST_DATA_RECV: Final = 52
_NEEDED: Final = _LAST_DATA_RECV + 4
_TCP_INFO: Final = getattr(socket, "TCP_INFO", None) if sys.platform.startswith("linux") else None
_u32 = struct.Struct("=I").unpack_from


def answer_in(sock: socket.socket | None) -> bool:
    """True when data reached *sock* after the last it sent: the answer, or its start, is in
    and waits to be read; False when not, or when it cannot be told."""
    if sock is None or _TCP_INFO is None:
        return False
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _NEEDED)
    except OSError:  # closed, or not a TCP socket
        return False
    if len(info) < _NEEDED:
        return False
    # Both are "milliseconds ago": the later event has the smaller figure. A request sent
    # in the tick its answer came tells nothing, and neither does a socket that has sent
    # nothing yet (its last send reads as the kernel's whole uptime).
    received_ago: int = _u32(info, _LAST_DATA_RECV)[0]
    sent_ago: int = _u32(info, _LAST_DATA_SENT)[0]
    return received_ago < sent_ago
