"""When a try's request left and its answer came, as the kernel saw them (Linux's ``TCP_INFO``).

On a busy process a try's own thread is slow to send its request and slow to read the answer:
it waits for the interpreter or a core. Past its delay on the caller's clock, such a try may
not have been out for the delay at all, or may have its answer in, waiting to be read; a
hedge then is load and no help, and goes through the same queue. The kernel knows when a
socket last sent and last received data (``tcpi_last_data_sent`` and
``tcpi_last_data_recv``, milliseconds ago, counted in its ticks), so, through the watch's
duplicate of a try's socket, the race holds a hedge until the request has really been out for
the delay, and sends none while the answer is in. Where that cannot be read (another system,
a socket not connected yet, an answer within the send's tick), nothing is known, and the
hedge goes by the caller's clock as before.
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


def _times(sock: socket.socket | None) -> tuple[int, int] | None:
    """Milliseconds since *sock* last sent data and since it last received data, or None."""
    if sock is None or _TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _NEEDED)
    except OSError:  # closed, or not a TCP socket
        return None
    if len(info) < _NEEDED:
        return None
    sent_ago: int = _u32(info, _LAST_DATA_SENT)[0]
    received_ago: int = _u32(info, _LAST_DATA_RECV)[0]
    return sent_ago, received_ago


def hedge_wait(sock: socket.socket | None, delay: float) -> float:
    """Seconds a first try's hedge should still wait, its race's *delay* having passed on the
    caller's clock: a delay more while the answer is in (it waits for its thread to run),
    what is left of the delay since the request really went out (its thread sent it late), or
    0: the request has been out for the delay with no answer, or the kernel cannot tell."""
    times = _times(sock)
    if times is None:
        return 0.0
    sent_ago, received_ago = times
    # Both are "ago": the later event has the smaller figure. A socket that has sent nothing
    # yet reads its last send as the kernel's whole uptime: its request is not out, and what
    # came in is the connection's opening or an earlier answer.
    if received_ago < sent_ago:
        return delay
    return max(0.0, delay - sent_ago / 1000)
