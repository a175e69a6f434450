"""http.client's response, reading past every informational (1xx) answer to the final one.

http.client reads past ``100 Continue`` only: any other 1xx (``102 Processing``, ``103 Early
Hints``) becomes the response, with an empty body, and the final answer stays unread on the
connection, so the next request the pool sends on it reads that answer as its own. RFC 9110
§15.2: a client must be able to parse one or more 1xx answers before the final one, even
unexpected ones, and may ignore them. ``101 Switching Protocols`` is final: the connection
speaks another protocol after it.
"""

from __future__ import annotations

import http.client
from typing import Final

from resilient_session._compat import read_status_line, skip_header_section

# As Go's net/http (max1xxResponses): a bound on the answers read past, so an upstream that
# sends nothing else cannot hold a try on them for ever.
MAX_INFORMATIONAL: Final = 5


class FinalResponse(http.client.HTTPResponse):
    """http.client's response whose status line is the final answer's: the informational
    answers before it are read and dropped, their header sections with them."""

    def _read_status(self) -> tuple[str, int, str]:
        line = read_status_line(self)
        if line[1] >= 200:  # the common case: one comparison more than http.client's own
            return line
        return self._past_informational(line)

    def _past_informational(self, line: tuple[str, int, str]) -> tuple[str, int, str]:
        skipped = 0
        while line[1] < 200 and line[1] != http.client.SWITCHING_PROTOCOLS:
            skipped += 1
            if skipped > MAX_INFORMATIONAL:
                # An HTTPException: urllib3 closes the connection and requests raises a
                # ConnectionError, as for any answer it cannot read.
                raise http.client.HTTPException(
                    f"more than {MAX_INFORMATIONAL} informational (1xx) answers before the "
                    "final one"
                )
            skip_header_section(self.fp)
            line = read_status_line(self)
        return line
