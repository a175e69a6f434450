"""The requests wire: the decisions' asks (``_pipeline/wire.py``) done with requests and
urllib3, on this package's connection classes and watchdog."""

from __future__ import annotations

from typing import Any

from requests import PreparedRequest
from requests.cookies import RequestsCookieJar

from resilient_session._compat import request_cookies
from resilient_session._state.runtime import Runtime
from resilient_session.errors import DeadlineExceeded

from .body import drain


class RequestsWire:
    """The wire of ``ResilientAdapter`` and ``ResilientSession``: one, stateless, shared."""

    __slots__ = ()

    # -- errors: what one says, and the refusal for a reason ---------------------------------

    # -- the try's request: headers, timeouts, a bound in time -------------------------------

    # -- answers: release one a retry replaces, carry the cookies it set ---------------------
    # Each answer is a requests.Response, each request a PreparedRequest, each jar of carried
    # cookies a RequestsCookieJar: typed Any only to fit the Protocol's transport-free types.

    def release(
        self, answer: Any, deadline_at: float | None, runtime: Runtime
    ) -> DeadlineExceeded | None:
        """Drain *answer* up to ``body.DRAIN_LIMIT`` and close it; the ``DeadlineExceeded``
        when the body outlasted *deadline_at* (the answer closed all the same)."""
        try:
            drain(answer, deadline_at, runtime)
        except DeadlineExceeded as cut:
            return cut
        return None

    def carried_cookies(
        self, request: Any, answer: Any, carried: Any
    ) -> tuple[Any, RequestsCookieJar] | None:
        """A copy of *request* sending *carried* and the cookies *answer* set; None when it
        set none (read only on a retry, never on the happy path)."""
        set_now = answer.cookies
        if not len(set_now):
            return None
        cookies = RequestsCookieJar()
        if carried is not None:
            cookies.update(carried)
        cookies.update(set_now)
        return self._with_cookies(request, cookies), cookies

    @staticmethod
    def _with_cookies(request: PreparedRequest, cookies: RequestsCookieJar) -> PreparedRequest:
        """A copy of *request* that also sends *cookies*; the caller's request is left as it
        was. The same steps as requests' ``resolve_redirects``: the Cookie header is rebuilt
        from the request's jar once the new cookies are in it."""
        retry = request.copy()  # copies the jar too
        jar = request_cookies(retry)
        if jar is None:
            jar = RequestsCookieJar()
        jar.update(cookies)
        retry.headers.pop("Cookie", None)
        retry.prepare_cookies(jar)
        return retry


REQUESTS_WIRE = RequestsWire()
