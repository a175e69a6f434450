"""Which hosts a sync sends, on a fake clock: every host in use; the idle ones a few at a time
while no opening is pushed, and once each when the listener is subscribed again."""

from __future__ import annotations

import random
from collections.abc import Callable

from resilient_session._state.breaker import BreakerState, TryResult
from resilient_session._state.fleet.breaker import FleetBreaker, StateCode
from resilient_session._state.fleet.budget import FleetBucket
from resilient_session._state.fleet.sync_batch import SyncedHost, take_batch
from resilient_session._state.fleet.sync_hosts import Roster
from resilient_session._state.fleet.throttle import FleetThrottle
from resilient_session._state.interface import Held
from resilient_session._state.limit import ConcurrencyLimit, Signal
from resilient_session.config.policy import HostPolicy, LimitPolicy
from resilient_session.testing import FakeClock

INTERVAL = 0.1
WARM = 1.0


class Fleet:
    """A roster over hosts built as the redis backend builds them, synced by hand: what the
    sync thread would send, without Redis."""

    def __init__(self, clock: FakeClock, count: int, limit: bool = False) -> None:
        self.clock = clock
        self.roster = Roster("t:", WARM, clock)
        self.wakes: list[str] = []
        self.held: list[Held] = []
        policy = HostPolicy()
        for number in range(count):
            key = f"http://h{number}.test:80"
            breaker = FleetBreaker(key, policy.breaker, clock, random.Random(0), self._waker(key))
            guards = (
                breaker,
                FleetBucket(policy.budget, clock),
                FleetThrottle(policy.throttle, clock, random.Random(0)),
            )
            in_flight = ConcurrencyLimit(key, LimitPolicy(), clock) if limit else None
            self.held.append((key, policy, guards, in_flight))
        self.roster.refresh(lambda: list(self.held))

    def _waker(self, key: str) -> Callable[[], None]:
        def wake() -> None:
            self.wakes.append(key)
            self.roster.touch(key)

        return wake

    def host(self, number: int) -> SyncedHost:
        return self.roster.hosts[self.held[number][0]]

    def call(self, number: int, result: TryResult = TryResult.SUCCESS) -> None:
        """One call's one try, as the stages make it: deposit, admission, result."""
        _, _, (breaker, bucket, throttle), _ = self.held[number]
        bucket.deposit()
        permit, _ = breaker.closed_admission or breaker.allow()
        assert permit is not None
        breaker.record(permit, result)
        assert throttle is not None
        throttle.record(result is TryResult.SUCCESS)

    def sync(self) -> list[str]:
        """One sync after one interval: the keys whose batches go out."""
        self.clock.advance(INTERVAL)
        self.roster.refresh(lambda: list(self.held))
        sent = []
        for host, resting in self.roster.due():
            batch = take_batch(host, "worker", 1_000, random.Random(0))
            if self.roster.keep(host, batch, resting):
                sent.append(host)
        self.roster.read(sent)
        return [host.key for host in sent]


def _key(number: int) -> str:
    return f"http://h{number}.test:80"


def test_a_host_called_between_syncs_is_sent_at_every_one(clock):
    """A host called once per interval for 5 seconds is in all 50 syncs."""
    fleet = Fleet(clock, 1)
    fleet.sync()
    sent = 0
    for _ in range(50):
        fleet.call(0)
        sent += _key(0) in fleet.sync()
    assert sent == 50


def test_an_idle_hosts_empty_batch_is_not_sent(clock):
    """Ten hosts called once: each is read at every sync for the warm second after its last
    try, then its empty batch stays home, and the next 50 syncs send at most the few idle
    reads (one host a second for ten idle hosts)."""
    fleet = Fleet(clock, 10)
    for number in range(10):
        fleet.call(number)
    warm = [len(fleet.sync()) for _ in range(12)]
    assert warm[:10] == [10] * 10
    assert warm[11] <= 1
    idle = [len(fleet.sync()) for _ in range(50)]
    assert sum(idle) <= 6
    assert max(idle) <= 1


def test_idle_hosts_are_read_round_robin_about_every_ten_seconds(clock):
    """200 idle hosts over 9.5 s of syncs: 20 reads a second, none read twice; and after a
    minute without a sync the reads owed are not all made at once: 16 at most."""
    fleet = Fleet(clock, 200)
    for number in range(200):
        fleet.call(number)
    for _ in range(12):
        fleet.sync()
    reads: list[str] = []
    per_sync = []
    for _ in range(95):
        sent = fleet.sync()
        reads += sent
        per_sync.append(len(sent))
    assert 188 <= len(reads) <= 191
    assert len(set(reads)) == len(reads)
    assert max(per_sync) <= 2
    fleet.clock.advance(60.0)
    assert len(fleet.sync()) == 16


def test_ten_thousand_idle_hosts_cost_a_sync_what_ten_do(clock):
    """10,000 idle hosts: a sync reads 10 of them (100 a second), not 10,000."""
    fleet = Fleet(clock, 10_000)
    fleet.sync()
    clock.advance(WARM)
    assert fleet.sync() == []
    per_sync = [len(fleet.sync()) for _ in range(20)]
    assert 199 <= sum(per_sync) <= 201
    assert max(per_sync) <= 11


def test_the_first_try_after_a_quiet_spell_wakes_the_sync(clock):
    """An idle host's breaker dozes: its next try wakes the sync thread, once, and that sync
    sends the host's batch; it is then in use again, sent at every sync for the warm second."""
    fleet = Fleet(clock, 2)
    fleet.call(0)
    fleet.call(1)
    for _ in range(12):
        fleet.sync()
    breaker = fleet.host(0).breaker
    assert breaker.closed_admission is None
    fleet.call(0)
    fleet.call(0)
    assert fleet.wakes == [_key(0)]
    assert breaker.closed_admission is not None
    sent = [fleet.sync() for _ in range(10)]
    assert all(_key(0) in keys for keys in sent)
    assert breaker.state is BreakerState.CLOSED


def test_a_host_with_a_try_in_flight_stays_in_use(clock):
    """A try that holds its concurrency slot for 5 s keeps its host sent at every sync, and
    the host goes idle one warm second after the try ends."""
    fleet = Fleet(clock, 1, limit=True)
    limit = fleet.held[0][3]
    assert limit is not None
    assert limit.acquire(None)
    sent = sum(_key(0) in fleet.sync() for _ in range(50))
    assert sent == 50
    fleet.call(0)
    limit.release(Signal.SUCCESS)
    after = [_key(0) in fleet.sync() for _ in range(20)]
    assert after[:9] == [True] * 9
    assert not any(after[11:])


def test_an_idle_host_read_back_follows_the_fleet_and_dozes_again(clock):
    """The fleet opened an idle host's breaker: the idle read takes it in, and once the fleet
    closes it again the host dozes still, so its next try wakes the sync thread."""
    fleet = Fleet(clock, 1)
    fleet.call(0)
    for _ in range(12):
        fleet.sync()
    host = fleet.host(0)
    host.breaker.adopt(StateCode.OPEN, 5.0, generation=3)
    host.breaker.exchange()  # the next idle read's batch
    host.breaker.adopt(StateCode.CLOSED, 0.0, generation=4)
    assert host.breaker.state is BreakerState.CLOSED
    fleet.roster.read([host])
    assert host.breaker.closed_admission is None
    fleet.call(0)
    assert fleet.wakes == [_key(0)]


def test_a_resting_host_called_just_before_its_sync_stays_in_use(clock):
    """A host called again right as its warm second ran out: the batch taken from it is not
    empty, so it is sent and the breaker's lock-free admission is given back."""
    fleet = Fleet(clock, 1)
    fleet.call(0)
    for _ in range(9):
        fleet.sync()
    clock.advance(WARM)
    fleet.call(0)
    assert _key(0) in fleet.sync()
    assert fleet.host(0).breaker.closed_admission is not None
    assert fleet.wakes == []


def test_a_host_added_is_sent_at_once_and_one_evicted_forgotten_within_a_second(clock):
    """The registry adds a host: the next sync sends it without reading the registry whole;
    the host it evicted is forgotten when the registry is read a second later."""
    fleet = Fleet(clock, 3)
    reads = []

    def source() -> list[Held]:
        reads.append(1)
        return list(fleet.held)

    fleet.roster.refresh(source)
    newcomer = Fleet(clock, 4).held[3]
    fleet.held = [*fleet.held[1:], newcomer]
    fleet.roster.add(newcomer)
    fleet.roster.refresh(source)
    assert reads == []
    assert set(fleet.roster.hosts) == {_key(0), _key(1), _key(2), _key(3)}
    assert _key(3) in [host.key for host, _ in fleet.roster.due()]
    clock.advance(WARM)
    fleet.roster.refresh(source)
    assert reads == [1]
    assert set(fleet.roster.hosts) == {_key(1), _key(2), _key(3)}


def test_a_dozing_breaker_admits_as_before(clock):
    """Dozing changes when the sync thread wakes, not what is admitted: closed admits, open
    refuses, and a dozing open breaker's probe wakes the sync thread once."""
    wakes: list[int] = []
    policy = HostPolicy().breaker
    breaker = FleetBreaker("http://a:80", policy, clock, random.Random(0), lambda: wakes.append(1))
    breaker.doze()
    assert breaker.allow()[0] is not None
    assert wakes == [1]
    breaker.adopt(StateCode.OPEN, 2.0, generation=1)
    breaker.doze()
    assert breaker.allow() == (None, None)
    assert wakes == [1, 1]
    clock.advance(2.0)
    permit, _ = breaker.allow()
    assert permit is not None
    assert permit.probe
    assert wakes == [1, 1]


def _idle(fleet: Fleet, count: int) -> None:
    """Call each of the first *count* hosts once, then sync until all are idle."""
    for number in range(count):
        fleet.call(number)
    for _ in range(12):
        fleet.sync()


def test_while_openings_are_pushed_idle_hosts_cost_no_sync(clock):
    """200 idle hosts, the listener subscribed since before they were called: 100 syncs over
    10 s send nothing at all."""
    fleet = Fleet(clock, 200)
    fleet.roster.pushed(True)
    fleet.sync()
    _idle(fleet, 200)
    assert [fleet.sync() for _ in range(100)] == [[]] * 100


def test_subscribed_again_each_idle_host_is_read_once(clock):
    """The subscription was lost and heard again: pushes may have been missed, so each of the
    200 idle hosts is read once, at most 100 a second, and then none is."""
    fleet = Fleet(clock, 200)
    fleet.roster.pushed(True)
    fleet.sync()
    _idle(fleet, 200)
    fleet.roster.pushed(False)
    fleet.roster.pushed(True)
    reads: list[str] = []
    per_sync = []
    for _ in range(40):
        sent = fleet.sync()
        reads += sent
        per_sync.append(len(sent))
    assert sorted(reads) == sorted(_key(n) for n in range(200))
    assert max(per_sync) <= 11
    assert sum(per_sync[:10]) <= 101


def test_without_a_subscription_idle_hosts_are_read_round_robin_again(clock):
    """The listener lost its subscription and has not got it back: idle hosts are read as
    when nothing is pushed, each about every ten seconds."""
    fleet = Fleet(clock, 100)
    fleet.roster.pushed(True)
    fleet.sync()
    _idle(fleet, 100)
    fleet.roster.pushed(False)
    reads = [key for _ in range(50) for key in fleet.sync()]
    assert 49 <= len(reads) <= 51
    assert len(set(reads)) == len(reads)
