"""Connection reuse across many retried calls, and one session shared by many threads."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from structlog.testing import capture_logs

from resilient_session import CircuitOpenError
from resilient_session.testing.upstream import Flaky, Reply

pytestmark = pytest.mark.integration

LEGAL_TRANSITIONS = {
    ("closed", "open"),
    ("open", "half_open"),
    ("half_open", "closed"),
    ("half_open", "open"),
}


def test_retried_calls_reuse_one_pooled_connection(upstream, make_session):
    """1,000 calls that each retry a 503 travel over one kept-alive connection, never more."""
    upstream.script("/pooled", Reply(503, body=b"busy"), Reply(200, body=b"ok"), cycle=True)
    session = make_session(
        retry={"backoff_base": 0.001, "backoff_cap": 0.001},
        # Every call retries once, so the budget must allow one retry per call.
        budget={"ratio": 1.0},
    )
    url = upstream.url("/pooled")

    bodies = Counter(session.get(url).content for _ in range(1000))

    assert bodies == {b"ok": 1000}
    assert upstream.hits("/pooled") == 2000
    assert upstream.connections == 1
    assert {hit.connection for hit in upstream.received("/pooled")} == {1}
    manager = session.get_adapter(url).poolmanager
    pools = [manager.pools[key] for key in manager.pools.keys()]  # noqa: SIM118 - no __iter__
    assert [(pool.num_connections, pool.num_requests) for pool in pools] == [(1, 2000)]


def test_threads_sharing_a_session_see_only_responses_and_legal_transitions(upstream, make_session):
    """32 threads x 200 calls against a 20% 503 upstream get only responses or
    CircuitOpenError, and every breaker transition logged is a legal one."""
    upstream.script("/shared", Flaky(0.2, status=503, seed=20))
    session = make_session(
        retry={"backoff_base": 0.001, "backoff_cap": 0.005},
        breaker={"failure_threshold": 3, "recovery_timeout": 0.02, "recovery_timeout_max": 0.1},
    )
    url = upstream.url("/shared")
    threads, calls = 32, 200
    start = threading.Barrier(threads)
    lock = threading.Lock()
    outcomes: Counter[object] = Counter()
    unexpected: list[BaseException] = []

    def work() -> None:
        seen: Counter[object] = Counter()
        try:
            start.wait(timeout=10)
            for _ in range(calls):
                try:
                    seen[session.get(url, timeout=5).status_code] += 1
                except CircuitOpenError:
                    seen[CircuitOpenError] += 1
        except Exception as exc:  # noqa: BLE001 - any other error is the failure reported
            with lock:
                unexpected.append(exc)
        with lock:
            outcomes.update(seen)

    started = time.monotonic()
    with capture_logs() as logs:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
    elapsed = time.monotonic() - started

    assert unexpected == []
    assert not any(worker.is_alive() for worker in workers)
    assert sum(outcomes.values()) == threads * calls
    assert set(outcomes) <= {200, 503, CircuitOpenError}
    # Fail-fast calls are quick, so while the breaker is open most calls end that way.
    assert outcomes[200] >= 100
    transitions = [e for e in logs if e["event"] == "breaker.transition"]
    assert {e["host"] for e in transitions} == {upstream.base_url}
    assert {(e["from"], e["to"]) for e in transitions} <= LEGAL_TRANSITIONS
    # Three 503s in a row are common at a 20% rate over thousands of tries.
    assert any((e["from"], e["to"]) == ("closed", "open") for e in transitions)
    tries = sum(1 for e in logs if e["event"] == "http.try" and e["status"] is not None)
    assert tries == upstream.hits("/shared")
    assert elapsed < 30
