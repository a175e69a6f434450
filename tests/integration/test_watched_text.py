"""Errors read as with plain requests when the watchdog's connection classes are in use."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import requests

from resilient_session import ResilientSession

pytestmark = pytest.mark.integration


def test_a_refused_connection_reads_as_with_plain_requests():
    """The watched pool and connection are spelled as urllib3's in error text, so a refused
    call with a deadline says what plain requests says, word for word (the address aside)."""

    def text(call: Callable[[], object]) -> str:
        with pytest.raises(requests.ConnectionError) as caught:
            call()
        return re.sub(r"0x[0-9a-f]+", "0x", str(caught.value))

    plain = requests.Session()
    resilient = ResilientSession({"defaults": {"retry": {"max_attempts": 1}}})
    try:
        url = "http://127.0.0.1:1/p"
        assert text(lambda: resilient.get(url, timeout=1, deadline=5.0)) == text(
            lambda: plain.get(url, timeout=1)
        )
    finally:
        plain.close()
        resilient.close()
