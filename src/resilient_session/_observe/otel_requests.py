"""A ``request_hook`` for opentelemetry-instrumentation-requests that redacts its span's URL.

The instrumentation's span for a call is the parent of the library's try spans
(docs/observability.md), but it records the URL as given: a secret query value the library's
own spans hide (``token=``), and the fragment, which never goes on the wire. The hook puts
the library's redaction in its place, before the span is exported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .redact import redact_url, sensitive_names

# The stable HTTP conventions' name, and the one the instrumentation still writes by default
# (``OTEL_SEMCONV_STABILITY_OPT_IN`` unset; ``http/dup`` writes both).
URL_ATTRIBUTES = ("url.full", "http.url")


class PreparedLike(Protocol):
    """What the hook reads of the request: ``requests.PreparedRequest`` has it."""

    @property
    def url(self) -> str | None: ...


def redacting_request_hook(
    redact_params: Iterable[str] = (),
) -> Callable[[Any, PreparedLike], None]:
    """A ``request_hook`` for ``RequestsInstrumentor().instrument()`` that rewrites the URL on
    the instrumentation's span as the library redacts its own: no userinfo, no fragment, and
    the values of the built-in sensitive parameters and of *redact_params* (the config's
    ``events.redact_params``) replaced by ``REDACTED``.

    Args:
        redact_params: names to hide beside the built-in ones, as ``events.redact_params``.

    Returns:
        A function of ``(span, request)``, the instrumentation's ``request_hook``.

    Example::

        from opentelemetry.instrumentation.requests import RequestsInstrumentor
        from resilient_session import redacting_request_hook

        RequestsInstrumentor().instrument(request_hook=redacting_request_hook())
    """
    names = sensitive_names(redact_params)

    def request_hook(span: Any, request: PreparedLike, /) -> None:
        url = request.url
        if not isinstance(url, str) or not span.is_recording():
            return
        redacted = redact_url(url, names)
        # An SDK span shows which of the two names the instrumentation wrote; a span that
        # does not gets both, so that neither can keep the secret.
        written = getattr(span, "attributes", None)
        for key in URL_ATTRIBUTES:
            if written is None or key in written:
                span.set_attribute(key, redacted)

    return request_hook
