"""The per-host gauges with many hosts: one collection reads each host's state once for all
five gauges, a later collection reads it afresh, and collections from many threads at once
agree with the registry (real SDK, in-memory reader)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider, ObservableGauge
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from resilient_session import OpenTelemetryHook
from resilient_session._state.breaker import CircuitBreaker, TryResult
from resilient_session._state.registry import HostRegistry
from resilient_session.config import load
from tests.threads import run_together

pytestmark = pytest.mark.integration

HOSTS = 10_000
GAUGES = (
    "resilient_session.breaker.state",
    "resilient_session.throttle.refusal_chance",
    "resilient_session.limit",
    "resilient_session.in_flight",
    "resilient_session.budget.tokens",
)


class Reads:
    """Counts each host's breaker snapshot: one a host for each walk over the hosts."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def counting(self, snapshot: Any) -> Any:
        def counted(breaker: CircuitBreaker) -> Any:
            with self._lock:
                self.count += 1
            return snapshot(breaker)

        return counted


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    counter = Reads()
    monkeypatch.setattr(CircuitBreaker, "snapshot", counter.counting(CircuitBreaker.snapshot))
    return counter


def _reader() -> InMemoryMetricReader:
    """An in-memory reader keeping a point for every host: recent SDKs keep 2,000 attribute
    sets a gauge by default (the rest overflow into one point); older ones have no limit and
    no such argument."""
    try:
        return InMemoryMetricReader(cardinality_limits={ObservableGauge: 4 * HOSTS})
    except TypeError:
        return InMemoryMetricReader()


def _registry(*readers: InMemoryMetricReader, hosts: int = HOSTS) -> HostRegistry:
    """A registry of *hosts* hosts whose gauges the *readers* collect."""
    hook = OpenTelemetryHook(TracerProvider(), MeterProvider(metric_readers=list(readers)))
    config = load({"defaults": {"limit": {"enabled": True}}})
    registry = HostRegistry(config, try_hooks=[hook])
    for index in range(hosts):
        registry.for_url(f"http://h{index}.test:8080/")
    return registry


def _points(reader: InMemoryMetricReader) -> dict[str, dict[tuple[Any, Any], Any]]:
    """Each gauge's value per (server.address, server.port), from one collection."""
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, dict[tuple[Any, Any], Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name not in GAUGES:
                    continue
                values = points.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    attributes = dict(point.attributes or {})
                    key = (attributes["server.address"], attributes["server.port"])
                    values[key] = getattr(point, "value", None)
    return points


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return _reader()


def test_one_collection_reads_each_host_once(reader, reads):
    """10,000 hosts: a collection of all five gauges takes 10,000 breaker snapshots, one walk
    (five before, one per gauge), and every gauge has a point for every host."""
    registry = _registry(reader)
    reads.count = 0

    points = _points(reader)

    assert reads.count == HOSTS
    assert sorted(points) == sorted(GAUGES)
    assert {name: len(values) for name, values in points.items()} == dict.fromkeys(GAUGES, HOSTS)
    assert len(registry) == HOSTS


def test_a_collection_hands_the_interpreter_over_every_hundred_hosts(reader, monkeypatch):
    """10,000 hosts: the walk and each gauge's points let a waiting thread run every 100
    hosts, so a call never waits the 5 ms switch interval for a whole collection: at least
    600 hand-overs (100 for the walk, 100 for each of five gauges), and nothing else sleeps."""
    import resilient_session._observe.otel_metrics as otel_metrics

    registry = _registry(reader)
    handed: list[None] = []
    monkeypatch.setattr(otel_metrics, "let_others_run", lambda: handed.append(None))
    sleeps: list[float] = []
    monkeypatch.setattr("time.sleep", sleeps.append)

    points = _points(reader)

    assert len(handed) >= 6 * HOSTS // 100
    assert sleeps == []
    assert {name: len(values) for name, values in points.items()} == dict.fromkeys(GAUGES, HOSTS)
    assert len(registry) == HOSTS


def test_each_collection_reads_the_hosts_afresh(reader, reads):
    """A breaker opened between two collections shows as open in the second, which took a
    walk of its own: the first collection's reading is never served again."""
    registry = _registry(reader)
    before = _points(reader)
    state = registry.for_url("http://h7.test:8080/")
    for _ in range(state.policy.breaker.failure_threshold):
        permit, _ = state.breaker.allow()
        assert permit is not None
        state.breaker.record(permit, TryResult.FAILURE)
    reads.count = 0

    after = _points(reader)

    assert reads.count == HOSTS
    key = ("h7.test", 8080)
    breaker = "resilient_session.breaker.state"
    assert (before[breaker][key], after[breaker][key]) == (0, 1)
    assert sum(after[breaker].values()) == 1


def test_collections_from_many_threads_agree_with_the_registry(reads):
    """Eight readers of one provider collected from 16 threads at once, 4 rounds each, while
    hosts keep being added to the 1,000: every collection has all five gauges with a point for
    each host the registry held before it began, and the walks never outnumber the
    collections."""
    readers = [_reader() for _ in range(8)]
    registry = _registry(*readers, hosts=1_000)
    adding = threading.Event()
    reads.count = 0
    collections = 0
    lock = threading.Lock()

    def collect(index: int) -> None:
        nonlocal collections
        for _ in range(4):
            held = len(registry)
            points = _points(readers[index % len(readers)])
            assert sorted(points) == sorted(GAUGES)
            assert all(len(values) >= held for values in points.values())
            with lock:
                collections += 1
        adding.set()

    def add() -> None:
        for index in range(200):
            if adding.is_set():
                return
            registry.for_url(f"http://late{index}.test:8080/")

    adder = threading.Thread(target=add)
    adder.start()
    run_together(16, collect, timeout=120.0)
    adder.join(10.0)

    assert collections == 64
    assert reads.count <= collections * len(registry)
