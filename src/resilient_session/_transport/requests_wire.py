"""The requests wire: the decisions' asks (``_pipeline/wire.py``) done with requests and
urllib3, on this package's connection classes and watchdog."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from http.client import responses
from typing import Any

import requests
from requests.cookies import RequestsCookieJar
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers

from resilient_session._compat import header_store, headers_of, keep_content, request_cookies
from resilient_session._observe.redact import redact_text
from resilient_session._pipeline.clamp import clamp
from resilient_session._pipeline.reason import Reason
from resilient_session._state.fallback import FallbackInfo
from resilient_session._state.fallback import mark as mark_fallback
from resilient_session._state.runtime import Runtime
from resilient_session._state.stale import StaleHit
from resilient_session._state.try_table import ErrorKind
from resilient_session.errors import DeadlineExceeded

from . import requests_errors
from .body import body_cut, drain
from .owned import take_owned
from .timeouts import split_timeout
from .watchdog import WATCHED, RaceWatch, TryWatch

_new_object = object.__new__
_current_watch = WATCHED.get


class RequestsWire:
    """The wire of ``ResilientAdapter`` and ``ResilientSession``: one, stateless, shared."""

    __slots__ = ()

    # -- errors: what one says, and the refusal for a reason ---------------------------------

    def error_kind(self, error: BaseException) -> ErrorKind:
        """What *error* says, by requests' exception classes and urllib3's causes
        (``requests_errors.py``)."""
        return requests_errors.error_kind(error)

    def refusal(
        self,
        reason: Reason,
        message: str,
        request: requests.PreparedRequest | None,
        original: BaseException | None = None,
    ) -> Exception:
        """``CircuitOpenError``, ``ThrottledError``, ``ConcurrencyLimitError``,
        ``DeadlineExceeded`` or ``HedgeCancelled``, as *reason* says."""
        return requests_errors.refusal(reason, message, request, original)

    # -- the try's request: headers, timeouts, a bound in time -------------------------------

    def with_header(
        self, request: requests.PreparedRequest, name: str, value: str, first: bool = False
    ) -> requests.PreparedRequest:
        """``with_headers`` for one header: the attempt header of each try of a call without
        a deadline, so written without a pair to build and a loop over it, its name folded
        once (``_fold``)."""
        # hot path: single-header
        if first and take_owned(request):
            # hot path: owned
            header_store(request.headers)[_FOLDED.get(name) or _fold(name)] = (name, value)
            return request
        return self.with_headers(request, ((name, value),))

    def with_headers(
        self,
        request: requests.PreparedRequest,
        pairs: Iterable[tuple[str, str]],
        first: bool = False,
    ) -> requests.PreparedRequest:
        """*request* sending the ``(name, value)`` *pairs* too: written into it on a call's
        *first* try of a request the call alone holds (``take_owned``), else into a copy.

        The copy is ``PreparedRequest.copy()`` without the cookie jar's copy, and with the
        header map's store copied and written directly (a folded name maps to the name as
        given and its value, as ``CaseInsensitiveDict`` keeps them): this runs on every try,
        where ``copy()`` and a header set cost about 9 µs and this about 1.5. Nothing changes
        the jar of a request on its way out: requests copies a request before it changes its
        cookies (redirects), and so does ``Attempt.next``.
        """
        if first and take_owned(request):
            # The request is the call's alone: its first try's headers go into it.
            # hot path: owned
            store = header_store(request.headers)
            for name, value in pairs:
                store[name.lower()] = (name, value)
            return request
        sent = _new_object(requests.PreparedRequest)
        # The instance dict copied whole rather than filled key by key.
        # hot path: header-store
        sent.__dict__ = request.__dict__.copy()
        original: Any = request.headers
        if original is None:
            store = OrderedDict()
        elif isinstance(original, CaseInsensitiveDict):
            # OrderedDict.copy, not dict(), which reads an OrderedDict through its keys.
            # hot path: header-store
            store = header_store(original).copy()
        else:
            # Any other mapping (a plain dict put on a prepared request), which requests sends
            # as it is: read into the map requests would have made of it.
            store = header_store(CaseInsensitiveDict(original))
        for name, value in pairs:
            store[name.lower()] = (name, value)
        sent.headers = headers_of(store)
        return sent

    def timeouts(self, timeout: Any) -> tuple[float | None, float | None]:
        """``(connect, read)`` seconds from any timeout requests accepts; None is no limit."""
        return split_timeout(timeout)

    def clamped(self, timeout: Any, remaining: float) -> tuple[tuple[float, float], bool, bool]:
        """``(connect, read)`` of *timeout*, each cut to *remaining* when longer or unset, and
        whether each was cut."""
        connect, read = split_timeout(timeout)
        connect_part, connect_cut = clamp(connect, remaining)
        read_part, read_cut = clamp(read, remaining)
        return (connect_part, read_part), connect_cut, read_cut

    def bounded(self, remaining: float, body: bool) -> TryWatch:
        """A watch on the try entered in it (``_transport/watchdog.py``): per-read timeouts
        restart with each byte, a watch bounds the whole try, and its connection arms it."""
        return TryWatch(remaining, body=body)

    def raced(self) -> RaceWatch:
        """A watch set in place of the try's own (the deadline stage's, if any) that the race
        may cut from another thread."""
        return RaceWatch(_current_watch())

    def deadline_error(
        self,
        fired: bool,
        error: BaseException | None,
        answer: requests.Response | None,
        cuts: tuple[bool, bool],
        message: str,
        request: requests.PreparedRequest,
        redact: frozenset[str],
    ) -> Exception | None:
        """``DeadlineExceeded`` for a try the deadline ended: a ``requests.Timeout`` of a part
        it clamped, a watch that fired, or a body it cut short; None for any other ending."""
        if fired and error is None and answer is not None:
            # Only a watch that lasts through the body fires on a try that returned: the body
            # ended as its socket was shut down, so it may be cut short (a trailer is, silently).
            return body_cut(answer, redact)
        if ((fired and error is not None) or isinstance(error, requests.Timeout)) and (
            not isinstance(error, DeadlineExceeded)
        ):
            connect_cut, read_cut = cuts
            cut = connect_cut if isinstance(error, requests.ConnectTimeout) else read_cut
            if cut or fired:
                return DeadlineExceeded(
                    f"{message}: {redact_text(str(error), redact)}",
                    request=request,
                    # Kept, not chained: urllib3's text in it quotes the whole URL.
                    original=error,
                )
        return None

    def cut_connecting(self, error: BaseException) -> bool:
        """A ``DeadlineExceeded`` whose ``original`` is a ``requests.ConnectTimeout``."""
        original = error.original if isinstance(error, DeadlineExceeded) else error
        return isinstance(original, requests.ConnectTimeout)

    # -- answers: release one a retry replaces, carry the cookies it set ---------------------

    def release(
        self, answer: requests.Response, deadline_at: float | None, runtime: Runtime
    ) -> DeadlineExceeded | None:
        """Drain *answer* up to ``body.DRAIN_LIMIT`` and close it; the ``DeadlineExceeded``
        when the body outlasted *deadline_at* (the answer closed all the same)."""
        try:
            drain(answer, deadline_at, runtime)
        except DeadlineExceeded as cut:
            return cut
        return None

    def carried_cookies(
        self,
        request: requests.PreparedRequest,
        answer: requests.Response,
        carried: RequestsCookieJar | None,
    ) -> tuple[requests.PreparedRequest, RequestsCookieJar] | None:
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
    def _with_cookies(
        request: requests.PreparedRequest, cookies: RequestsCookieJar
    ) -> requests.PreparedRequest:
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

    # -- fallback: what a call's answer holds, an answer made from a stored one, the mark ----

    def is_answer(self, value: object) -> bool:
        """A ``requests.Response`` (or a subclass)."""
        return isinstance(value, requests.Response)

    def body(self, answer: requests.Response) -> bytes:
        """``answer.content``: read already, as the caller does not stream."""
        content: bytes | None = answer.content
        return content if content is not None else b""

    def stored_answer(self, request: requests.PreparedRequest, hit: StaleHit) -> requests.Response:
        """A ``requests.Response`` as ``HTTPAdapter.build_response`` makes one, its body in
        hand (``_content``), so it reads as any answer read whole does."""
        stored = hit.answer
        response = requests.Response()
        response.status_code = stored.status
        headers = CaseInsensitiveDict(hit.served_headers())
        # The body was kept as the caller read it, decoded: the copy says what it holds.
        headers.pop("Content-Encoding", None)
        if "Content-Length" in headers:
            headers["Content-Length"] = str(len(stored.body))
        response.headers = headers
        keep_content(response, stored.body)
        response.raw = None
        response.reason = responses.get(stored.status, "")
        response.url = request.url or ""
        response.request = request
        response.encoding = get_encoding_from_headers(response.headers)
        return response

    def mark(self, answer: requests.Response, info: FallbackInfo) -> None:
        mark_fallback(answer, info)


def _fold(name: str) -> str:
    """*name* as a ``CaseInsensitiveDict`` keys it, kept for the next try."""
    if len(_FOLDED) >= _FOLDED_KEPT:
        _FOLDED.clear()
    folded = _FOLDED[name] = name.lower()
    return folded


# The attempt header's name as its store keys it: one name a config, so a handful a process.
_FOLDED: dict[str, str] = {}
_FOLDED_KEPT = 64

REQUESTS_WIRE = RequestsWire()
