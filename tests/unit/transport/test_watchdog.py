"""The watchdog's heap and the race between firing and disarming, on a fake clock."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from resilient_session._transport.watchdog import (
    ARMED,
    DISARMED,
    FIRED,
    FIRING,
    IDLE,
    WATCHDOG,
    TryWatch,
    Watch,
    Watchdog,
)
from resilient_session.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def dog(clock: FakeClock) -> Watchdog:
    return Watchdog(clock, autostart=False)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    ours.settimeout(5.0)
    theirs.settimeout(5.0)
    yield ours, theirs
    ours.close()
    theirs.close()


def test_a_watch_past_its_instant_shuts_its_socket_down(clock, dog, pair):
    """Fired at its instant, the watch's socket reads EOF at once, and disarm reports it."""
    ours, _ = pair
    watch = Watch(1.0, now=clock.monotonic)
    dog.arm(watch, ours)

    clock.now += 0.999
    assert dog.fire_due() == 0
    clock.now += 0.001
    assert dog.fire_due() == 1

    assert watch.state == FIRED
    assert ours.recv(1) == b""  # a recv blocked here would have woken the same way
    assert dog.disarm(watch) is True
    assert len(dog) == 0


def test_a_disarmed_watch_never_touches_its_socket(clock, dog, pair):
    """Disarmed before its instant, the watch leaves the socket usable after the instant."""
    ours, theirs = pair
    watch = Watch(1.0, now=clock.monotonic)
    dog.arm(watch, ours)

    assert dog.disarm(watch) is False
    clock.now += 5.0
    assert dog.fire_due() == 0

    theirs.sendall(b"still open")
    assert ours.recv(32) == b"still open"
    assert watch.state == DISARMED


def test_a_disarmed_watch_leaves_the_watchdog_at_once(clock, dog):
    """A disarmed watch goes at once, wherever its instant falls among the armed ones;
    nothing is fired for either."""
    first = Watch(1.0, now=clock.monotonic)
    second = Watch(2.0, now=clock.monotonic)
    dog.arm(first, None)
    dog.arm(second, None)

    dog.disarm(second)
    assert len(dog) == 1  # behind an armed watch, it goes all the same
    dog.disarm(first)
    assert len(dog) == 0

    clock.now += 3.0
    assert dog.fire_due() == 0


def test_a_heap_of_mostly_disarmed_watches_is_rebuilt(clock, dog):
    """With mixed deadlines, disarmed watches behind a long one do not pile up without bound."""
    long_one = Watch(60.0, now=clock.monotonic)
    dog.arm(long_one, None)
    shorter = [Watch(60.0 + index, now=clock.monotonic) for index in range(1, 301)]
    for watch in shorter:
        dog.arm(watch, None)
    for watch in shorter:
        dog.disarm(watch)

    assert len(dog) < 100
    assert long_one.state == ARMED
    clock.now += 61.0
    assert dog.fire_due() == 1
    assert long_one.state == FIRED


def test_attach_after_firing_is_refused(clock, dog, pair):
    """A socket made after the watch fired (a slow connect) is refused: the caller closes it."""
    ours, _ = pair
    watch = Watch(0.5, now=clock.monotonic)
    dog.arm(watch, None)  # armed before the socket exists, as a new connection arms
    clock.now += 1.0
    assert dog.fire_due() == 1

    assert dog.attach(watch, ours) is False
    assert watch.sock is None


def test_attach_before_firing_gives_the_watch_its_socket(clock, dog, pair):
    ours, _ = pair
    watch = Watch(0.5, now=clock.monotonic)
    dog.arm(watch, None)

    assert dog.attach(watch, ours) is True
    clock.now += 1.0
    assert dog.fire_due() == 1
    assert ours.recv(1) == b""


class _SlowShutdown:
    """A socket whose shutdown blocks until released, to hold a firing in progress."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def shutdown(self, how: int) -> None:
        self.calls += 1
        self.entered.set()
        self.release.wait(5.0)


def test_disarm_waits_for_a_firing_in_progress(clock, dog):
    """The race guard: a disarm that meets a firing returns only once the shutdown is done,
    so its caller never closes or pools a socket the watchdog is still shutting down."""
    sock = _SlowShutdown()
    watch = Watch(0.5, now=clock.monotonic)
    dog.arm(watch, sock)  # duck-typed: only shutdown() is called
    clock.now += 1.0
    firing = threading.Thread(target=dog.fire_due)
    firing.start()
    assert sock.entered.wait(5.0)
    assert watch.state == FIRING

    result: list[bool] = []
    disarming = threading.Thread(target=lambda: result.append(dog.disarm(watch)))
    disarming.start()
    disarming.join(0.2)
    assert disarming.is_alive()  # still waiting on the shutdown
    assert result == []

    sock.release.set()
    firing.join(5.0)
    disarming.join(5.0)
    assert result == [True]
    assert sock.calls == 1
    assert watch.state == FIRED


def test_settle_is_free_for_a_watch_that_was_never_armed(monkeypatch):
    """A try that never reached a connection (a refused try, a mocked transport) settles
    without asking the watchdog."""

    def no_disarm(watch: Watch) -> bool:
        raise AssertionError("disarm called for a watch that was never armed")

    monkeypatch.setattr(WATCHDOG, "disarm", no_disarm)
    watch = TryWatch(1.0)
    with watch:
        assert watch.state == IDLE
    assert watch.fired is False


def test_the_thread_starts_only_when_a_watch_is_armed(clock):
    """No thread for a process that never arms a watch; one for all once one does."""
    dog = Watchdog(clock)
    assert dog._thread is None
    watch = Watch(3600.0, now=clock.monotonic)
    dog.arm(watch, None)
    thread = dog._thread
    assert thread is not None
    assert thread.daemon
    other = Watch(3600.0, now=clock.monotonic)
    dog.arm(other, None)
    assert dog._thread is thread
    dog.disarm(watch)
    dog.disarm(other)
    assert len(dog) == 0


def test_arm_and_disarm_take_no_lock(clock, dog, pair):
    """A healthy try's arm and disarm never wait on the watchdog's lock, which the thread
    and the rare paths hold: with the lock held elsewhere, both still finish at once."""
    ours, _ = pair
    watch = Watch(1.0, now=clock.monotonic)
    done = threading.Event()
    result: list[bool] = []

    def arm_and_disarm() -> None:
        dog._wake_at = 5.0  # a thread asleep until after this watch's instant: no wake-up
        dog.arm(watch, ours)
        result.append(dog.disarm(watch))
        done.set()

    with dog._lock:
        worker = threading.Thread(target=arm_and_disarm)
        worker.start()
        finished = done.wait(5.0)
    worker.join(5.0)

    assert finished
    assert result == [False]
    assert watch.state == DISARMED
    assert len(dog) == 0


def test_each_watch_is_either_disarmed_or_fired_never_both(clock, dog):
    """Disarms racing the watchdog over 2,000 due watches: each ends exactly one way, its
    disarm says which, and only the fired ones' sockets are shut down."""

    class _Counting:
        def __init__(self) -> None:
            self.shutdowns = 0

        def shutdown(self, how: int) -> None:
            self.shutdowns += 1

    watches = [Watch(0.5, now=clock.monotonic) for _ in range(2000)]
    socks = [_Counting() for _ in watches]
    for watch, sock in zip(watches, socks, strict=True):
        dog.arm(watch, sock)  # duck-typed: only shutdown() is called
    clock.now += 1.0
    fired: list[int] = []
    disarmed: list[bool] = []
    firing = threading.Thread(target=lambda: fired.extend(dog.fire_due() for _ in range(50)))

    firing.start()
    disarmed.extend(dog.disarm(watch) for watch in watches)
    firing.join(10.0)

    assert not firing.is_alive()
    assert sum(fired) == disarmed.count(True)
    for watch, sock, was_fired in zip(watches, socks, disarmed, strict=True):
        assert watch.state == (FIRED if was_fired else DISARMED)
        assert sock.shutdowns == (1 if was_fired else 0)
    assert len(dog) == 0


def test_a_cut_fires_an_armed_watch_on_the_cutting_thread(clock, dog, pair):
    """No watchdog thread runs (autostart off): a cut shuts the armed watch's socket down at
    once, before its instant, and its disarm reports it fired."""
    ours, _ = pair
    watch = Watch(60.0, now=clock.monotonic)
    dog.arm(watch, ours)
    dog.cut(watch)
    assert watch.state == FIRED
    assert ours.recv(1) == b""
    assert (dog.disarm(watch), len(dog)) == (True, 0)


def test_a_watch_cut_before_its_arm_fires_once_armed(clock, dog, pair):
    """Cut while its connection is still being made: nothing fires yet; once armed it is due
    at once, and the watchdog's next look shuts its socket down."""
    ours, _ = pair
    watch = Watch(60.0, now=clock.monotonic)
    dog.cut(watch)
    assert watch.state == IDLE
    dog.arm(watch, ours)
    assert dog.fire_due() == 1
    assert (watch.state, ours.recv(1)) == (FIRED, b"")


def test_a_cut_after_the_disarm_leaves_the_socket_alone(clock, dog, pair):
    """A try that ended first disarmed its watch: a cut arriving late does nothing to it."""
    ours, theirs = pair
    watch = Watch(60.0, now=clock.monotonic)
    dog.arm(watch, ours)
    assert dog.disarm(watch) is False
    dog.cut(watch)
    assert watch.state == DISARMED
    theirs.sendall(b"x")
    assert ours.recv(1) == b"x"


def test_each_cut_watch_is_either_disarmed_or_fired_never_both(clock, dog):
    """8 threads cutting 2,000 armed watches while their tries disarm them: each ends exactly
    one way, its disarm says which, and only the fired ones' sockets are shut down."""

    class _Counting:
        def __init__(self) -> None:
            self.shutdowns = 0

        def shutdown(self, how: int) -> None:
            self.shutdowns += 1

    watches = [Watch(60.0, now=clock.monotonic) for _ in range(2000)]
    socks = [_Counting() for _ in watches]
    for watch, sock in zip(watches, socks, strict=True):
        dog.arm(watch, sock)  # duck-typed: only shutdown() is called
    disarmed: list[bool] = []

    def cut(index: int) -> None:
        for watch in watches[index::8]:
            dog.cut(watch)

    cutters = [threading.Thread(target=cut, args=(index,)) for index in range(8)]
    for cutter in cutters:
        cutter.start()
    disarmed.extend(dog.disarm(watch) for watch in watches)
    for cutter in cutters:
        cutter.join(10.0)

    assert not any(cutter.is_alive() for cutter in cutters)
    for watch, sock, was_fired in zip(watches, socks, disarmed, strict=True):
        assert watch.state == (FIRED if was_fired else DISARMED)
        assert sock.shutdowns == (1 if was_fired else 0)
    assert len(dog) == 0
