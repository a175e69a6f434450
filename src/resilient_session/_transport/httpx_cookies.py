"""The resilient clients' cookie jar: httpx's, minus its work on an answer that sets no cookie.

After every answer httpx's client calls ``Cookies.extract_cookies``, which wraps the answer
and its request for ``http.cookiejar`` (an ``email.message.Message`` of the answer's headers,
built twice, and a ``urllib.request.Request`` of the request's), only for the standard
library's ``CookieJar.make_cookies`` to find no ``Set-Cookie`` or ``Set-Cookie2`` header and
return nothing. That is about 160,000 instructions a call, a quarter of a plain
``httpx.Client`` call on an answer that costs nothing to receive; most API answers set no
cookie.

``AnswerCookies`` looks at the answer's header names first and skips the call when none can
set a cookie and the jar is the standard library's logic (a jar whose ``extract_cookies`` or
``make_cookies`` is its own is always called). Skipped, the jar misses nothing: with neither
header, ``make_cookies`` returns before the policy is asked, and ``extract_cookies`` sets no
cookie. The one state it would have touched is the jar's clock (``_now``), which every read
of the jar sets again before use.
"""

from __future__ import annotations

from http.cookiejar import CookieJar
from typing import Any, Final

import httpx

from .httpx_compat import RESPONSE_REQUEST, may_set_cookie

_EXTRACT: Final = CookieJar.extract_cookies
_MAKE: Final = CookieJar.make_cookies


class AnswerCookies(httpx.Cookies):
    """``httpx.Cookies`` on the same jar, whose ``extract_cookies`` returns at once for an
    answer with no header that could set a cookie."""

    def extract_cookies(self, response: httpx.Response) -> None:
        """As ``httpx.Cookies.extract_cookies``; skipped where it would find nothing."""
        jar = type(self.jar)
        if (
            jar.extract_cookies is _EXTRACT
            and jar.make_cookies is _MAKE
            # A response without a request raises in httpx's, and so here.
            and getattr(response, RESPONSE_REQUEST) is not None
            and not may_set_cookie(response.headers)
        ):
            return
        super().extract_cookies(response)


def answer_cookies(cookies: Any) -> AnswerCookies:
    """``httpx.Cookies(cookies)``, as httpx's client setter makes it (a ``Cookies`` given is
    copied, a ``CookieJar`` kept), as an :class:`AnswerCookies`."""
    return AnswerCookies(httpx.Cookies(cookies).jar)
