"""FlakyUpstream itself: defaults, records, scripts, shutdown and the refused address."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from resilient_session.testing.upstream import Drip, FlakyUpstream, Hang, Reply, refused_url

pytestmark = pytest.mark.integration


def test_unscripted_path_answers_200_and_every_request_is_recorded(upstream):
    """An unscripted path answers 200 ok; method, target, headers and body are recorded."""
    with requests.Session() as plain:
        got = plain.get(upstream.url("/any?q=1"), headers={"X-Probe": "p-1"})
        put = plain.put(upstream.url("/any"), data=b"payload")

    assert (got.status_code, got.content, put.status_code) == (200, b"ok", 200)
    first, second = upstream.received("/any")
    assert (first.method, first.target, first.header("x-probe"), first.body) == (
        "GET",
        "/any?q=1",
        "p-1",
        b"",
    )
    assert (second.method, second.target, second.body) == ("PUT", "/any", b"payload")
    assert (upstream.hits("/any"), upstream.total_hits, upstream.connections) == (2, 2, 1)
    assert first.client[0] == "127.0.0.1"


def test_script_repeats_its_last_step_or_cycles(upstream):
    """A script repeats its last step, or with cycle=True starts over after it."""
    upstream.script("/last", Reply(503), Reply(201))
    upstream.script("/cycle", Reply(503), Reply(201), cycle=True)

    with requests.Session() as plain:
        last = [plain.get(upstream.url("/last")).status_code for _ in range(4)]
        cycle = [plain.get(upstream.url("/cycle")).status_code for _ in range(4)]

    assert last == [503, 201, 201, 201]
    assert cycle == [503, 201, 503, 201]


def test_stop_returns_quickly_while_requests_hang_and_drip():
    """Leaving the block ends hanging and dripping requests and returns within half a second."""
    errors: list[str] = []

    def call(url: str) -> None:
        try:
            requests.get(url, timeout=10).close()
        except requests.RequestException as exc:
            errors.append(type(exc).__name__)

    with FlakyUpstream() as up:
        up.script("/hang", Hang(20))
        up.script("/drip", Drip(total_bytes=1000, interval=0.1))
        callers = [
            threading.Thread(target=call, args=(up.url(path),)) for path in ("/hang", "/drip")
        ]
        for caller in callers:
            caller.start()
        time.sleep(0.3)
        stopping = time.monotonic()
    stopped_in = time.monotonic() - stopping
    for caller in callers:
        caller.join(timeout=5)

    assert stopped_in < 0.5
    assert sorted(errors) == ["ChunkedEncodingError", "ConnectionError"]
    assert (up.hits("/hang"), up.hits("/drip")) == (1, 1)


def test_refused_url_refuses_connections():
    """Nothing listens behind refused_url(), so a connect fails at once."""
    url = refused_url("/nothing")

    started = time.monotonic()
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=2)

    assert url.startswith("http://127.0.0.1:")
    assert time.monotonic() - started < 0.5


def test_invalid_steps_are_refused():
    """Steps that would wait past MAX_WAIT or make no sense are rejected when built."""
    with pytest.raises(ValueError, match="seconds"):
        Hang(3600)
    with pytest.raises(ValueError, match="status"):
        Reply(99)
    with pytest.raises(ValueError, match="interval"):
        Drip(total_bytes=10, interval=-1)
