"""What a requests user meets first, against real sockets: cookies, proxies, long error
bodies, impatient callers and bytes-like bodies."""

from __future__ import annotations

import pytest
import requests
from structlog.testing import capture_logs

from resilient_session.upstream import refused_url

pytestmark = pytest.mark.integration


def test_post_through_a_refusing_proxy_is_retried_as_a_connect_failure(make_session):
    """A proxy that refuses the connection never saw the POST: every try is made, the call
    ends on max_attempts (not not_idempotent) and raises requests' ProxyError."""
    proxy = refused_url()
    session = make_session(retry={"max_attempts": 3})

    with capture_logs() as logs, pytest.raises(requests.exceptions.ProxyError):
        session.post("http://origin.test/orders", data=b"{}", proxies={"http": proxy})

    tries = [(e["decision"], e["reason"]) for e in logs if e["event"] == "http.try"]
    assert tries == [("retry", "transient"), ("retry", "transient"), ("give_up", "max_attempts")]
