"""Reading any timeout requests accepts as its connect and read parts."""

from __future__ import annotations

from typing import Any

from urllib3.util import Timeout as Urllib3Timeout

from resilient_session._compat import timeout_parts
from resilient_session._pipeline.clamp import seconds as _seconds


def split_timeout(timeout: Any) -> tuple[float | None, float | None]:
    """``(connect, read)`` seconds from any timeout requests accepts; None means no limit."""
    if isinstance(timeout, Urllib3Timeout):
        # Its connect_timeout and read_timeout properties raise for a total= timeout whose
        # timer has not started; the parts they are made of can be read at any time.
        total = _seconds(timeout.total)
        connect, read = (_seconds(part) for part in timeout_parts(timeout))
        if total is not None:
            connect = total if connect is None else min(connect, total)
            read = total if read is None else min(read, total)
        return connect, read
    if isinstance(timeout, tuple | list) and len(timeout) == 2:
        return _seconds(timeout[0]), _seconds(timeout[1])
    value = _seconds(timeout)
    return value, value
