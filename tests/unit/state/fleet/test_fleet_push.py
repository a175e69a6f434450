"""Openings pushed to every worker, on a fake clock: the message, a breaker hearing one, and the
listener thread's loop over a scripted connection."""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resilient_session._state.breaker import BreakerState, TryResult
from resilient_session._state.fleet import push
from resilient_session._state.fleet.breaker import Change, FleetBreaker, StateCode
from resilient_session._state.fleet.push import Pushed, parse
from resilient_session.config.policy import BreakerPolicy
from resilient_session.testing import FakeClock

HOST = "http://svc.test:80"

# -- the message --------------------------------------------------------------------------------


def test_an_opening_as_the_script_publishes_it_is_read_back():
    """``<generation>:<open for ms>:<host>``, the host's own colons kept, as bytes or text."""
    assert parse(b"1700000000123:30000:http://svc.test:80") == Pushed(
        "http://svc.test:80", 1_700_000_000_123, 30_000
    )
    assert parse("7:0:h") == Pushed("h", 7, 0)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"7:30000",
        b"7:30000:",
        b"-7:30000:h",
        b"7:-1:h",
        b"7.5:30000:h",
        b"7:3e4:h",
        b" 7:30000:h",
        "\u0667:30000:h".encode(),  # an Arabic-Indic digit seven: a digit, but no ASCII one
        b"4503599627370497:1:h",  # 2^52 + 1: past any generation the script writes
        b"1:" + b"9" * 17 + b":h",
        b"\xff\xfe:1:h",
        None,
        7,
    ],
)
def test_anything_else_on_the_channel_is_no_opening(data):
    """Whatever a stranger publishes on the channel that is not an opening reads as None."""
    assert parse(data) is None


@given(st.binary(max_size=64))
def test_no_bytes_make_parse_raise(data):
    """Arbitrary bytes read as an opening within range, or as None; never an exception."""
    pushed = parse(data)
    if pushed is not None:
        assert pushed.host
        assert 0 <= pushed.generation <= 2**52
        assert pushed.open_for_ms >= 0


@given(
    st.integers(0, 2**52),
    st.integers(0, 10**15),
    st.text(min_size=1, max_size=40).filter(lambda text: text.isprintable()),
)
def test_every_opening_the_script_can_publish_reads_back_as_itself(generation, open_ms, host):
    """Any generation, duration and host the script formats reads back unchanged."""
    assert parse(f"{generation}:{open_ms}:{host}".encode()) == Pushed(host, generation, open_ms)


def test_each_fleet_has_a_channel_of_its_own():
    """The channel is under the key prefix: two prefixes on one Redis never hear each other."""
    assert push.channel("a:") != push.channel("b:")
    assert push.channel("a:").startswith("a:")


# -- a breaker hearing one ----------------------------------------------------------------------


def _breaker(clock: FakeClock, threshold: int = 5) -> FleetBreaker:
    policy = BreakerPolicy(failure_threshold=threshold, recovery_timeout=2.0)
    return FleetBreaker(HOST, policy, clock, random.Random(0), lambda: None)


def _state(breaker: FleetBreaker) -> BreakerState:
    return breaker.state


def _record(breaker: FleetBreaker, result: TryResult) -> None:
    permit, _ = breaker.allow()
    assert permit is not None
    breaker.record(permit, result)


def test_a_pushed_opening_opens_a_closed_breaker_at_once(clock):
    """A closed breaker hears an opening for 30 s: open now, for 30 s, and it refuses."""
    breaker = _breaker(clock)
    breaker.adopt(StateCode.CLOSED, 0.0, generation=2)
    followed, transition = breaker.hear(generation=3, open_for=30.0)
    assert followed
    assert transition is not None
    assert (transition.from_state, transition.to_state) == (BreakerState.CLOSED, BreakerState.OPEN)
    assert breaker.snapshot().open_for == 30.0
    assert breaker.allow() == (None, None)


def test_a_push_no_newer_than_what_the_breaker_knows_changes_nothing(clock):
    """The sync already brought generation 5 (closed): pushes of generation 5 or older are
    old news, heard late."""
    breaker = _breaker(clock)
    breaker.adopt(StateCode.CLOSED, 0.0, generation=5)
    assert breaker.hear(generation=5, open_for=30.0) == (False, None)
    assert breaker.hear(generation=4, open_for=30.0) == (False, None)
    assert _state(breaker) is BreakerState.CLOSED


def test_a_sync_reply_older_than_a_push_heard_meanwhile_is_not_followed(clock):
    """A batch goes out at generation 4; the push of opening 5 arrives before the reply,
    which the script wrote before that opening (closed, 4): the breaker stays open. The next
    sync's reply is followed again."""
    breaker = _breaker(clock)
    breaker.adopt(StateCode.CLOSED, 0.0, generation=4)
    breaker.exchange()
    breaker.hear(generation=5, open_for=30.0)
    assert breaker.adopt(StateCode.CLOSED, 0.0, generation=4) is None
    assert _state(breaker) is BreakerState.OPEN
    breaker.exchange()
    assert breaker.adopt(StateCode.OPEN, 29.9, generation=5) is None
    assert _state(breaker) is BreakerState.OPEN


def test_a_forged_push_is_undone_by_the_next_sync_and_not_followed_again(clock):
    """A stranger publishes an opening one generation past the fleet's: the breaker follows
    it, the next sync's reply (closed, at the fleet's real generation) closes it again, and
    the same opening published again is not followed, before or after the next syncs."""
    breaker = _breaker(clock)
    breaker.adopt(StateCode.CLOSED, 0.0, generation=4)
    assert breaker.hear(generation=5, open_for=30.0)[0]
    assert _state(breaker) is BreakerState.OPEN
    breaker.exchange()
    transition = breaker.adopt(StateCode.CLOSED, 0.0, generation=4)
    assert transition is not None
    assert _state(breaker) is BreakerState.CLOSED
    for _ in range(3):
        assert breaker.hear(generation=5, open_for=30.0) == (False, None)
        assert breaker.hear(generation=3, open_for=30.0) == (False, None)
        breaker.exchange()
        assert breaker.adopt(StateCode.CLOSED, 0.0, generation=4) is None
    assert _state(breaker) is BreakerState.CLOSED
    # A newer opening is followed: the fleet's own, or a stranger's next one.
    assert breaker.hear(generation=6, open_for=30.0)[0]
    assert _state(breaker) is BreakerState.OPEN


@pytest.mark.parametrize("ahead", [65, 10**6, 2**52 - 4])
def test_a_push_far_ahead_of_the_generation_last_read_is_not_followed(clock, ahead):
    """The fleet was read at generation 4: an opening more than 64 generations past it is
    not the fleet's (or follows a rebuilt hash, which the next read brings), and changes
    nothing; one 64 past it is followed."""
    breaker = _breaker(clock)
    breaker.adopt(StateCode.CLOSED, 0.0, generation=4)
    assert breaker.hear(generation=4 + ahead, open_for=30.0) == (False, None)
    assert _state(breaker) is BreakerState.CLOSED
    assert breaker.hear(generation=4 + 64, open_for=30.0)[0]
    assert _state(breaker) is BreakerState.OPEN


def test_pushes_climbing_past_one_another_stop_64_past_the_generation_last_read(clock):
    """Openings pushed one past the other, each within 64 of the one before, are followed only
    up to 64 past the generation last read: the window moves with the fleet's reads, not with
    what was pushed."""
    breaker = _breaker(clock)
    breaker.adopt(StateCode.CLOSED, 0.0, generation=4)
    followed = [breaker.hear(generation=4 + step, open_for=1.0)[0] for step in (60, 120, 180)]
    assert followed == [True, False, False]


def test_a_breaker_never_read_follows_no_push(clock):
    """Before its first sync's reply (generation 0), a breaker has nothing to weigh a push
    against: the sync, under way for a host just added, reads the fleet's state."""
    breaker = _breaker(clock)
    assert breaker.hear(generation=1_700_000_000_000, open_for=30.0) == (False, None)
    assert _state(breaker) is BreakerState.CLOSED


def test_a_pushed_opening_overtakes_a_probes_closing_not_yet_sent(clock):
    """A probe closed the breaker here; before that closing went out, the fleet reopened (a
    newer generation): the breaker follows the opening and its closing is not sent."""
    breaker = _breaker(clock)
    breaker.adopt(StateCode.OPEN, 2.0, generation=4)
    breaker.exchange()
    clock.advance(2.0)
    _record(breaker, TryResult.SUCCESS)
    assert _state(breaker) is BreakerState.CLOSED
    breaker.hear(generation=6, open_for=4.0)
    assert _state(breaker) is BreakerState.OPEN
    assert breaker.exchange().change is Change.NONE


def test_a_breaker_that_opened_itself_keeps_its_opening_to_send(clock):
    """A breaker opened by its own failures, its batch not yet sent, hears the fleet's
    opening: it stays open for the fleet's time, and still tells the fleet it opened."""
    breaker = _breaker(clock, threshold=2)
    breaker.adopt(StateCode.CLOSED, 0.0, generation=4)
    breaker.exchange()
    _record(breaker, TryResult.FAILURE)
    _record(breaker, TryResult.FAILURE)
    assert breaker.hear(generation=5, open_for=9.0) == (True, None)
    assert breaker.snapshot().open_for == 9.0
    assert breaker.exchange().change is Change.OPENED


def test_an_opening_made_here_hurries_the_sync_and_a_failure_only_wakes_it(clock):
    """A failure wakes the sync thread; the failure that opens the breaker hurries it (the
    fleet hears of the opening without the gap between urgent syncs)."""
    calls: list[str] = []
    policy = BreakerPolicy(failure_threshold=2, recovery_timeout=2.0)
    breaker = FleetBreaker(
        HOST,
        policy,
        clock,
        random.Random(0),
        lambda: calls.append("wake"),
        lambda: calls.append("hurry"),
    )
    _record(breaker, TryResult.FAILURE)
    _record(breaker, TryResult.FAILURE)
    assert calls == ["wake", "hurry"]


# -- the listener thread ------------------------------------------------------------------------


class Stop:
    """The thread's stop event on the fake clock: each wait is recorded and takes no time;
    set after *waits* waits."""

    def __init__(self, waits: int = 100) -> None:
        self.waits: list[float] = []
        self._left = waits
        self.stopped = False

    def is_set(self) -> bool:
        return self.stopped

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        self._left -= 1
        if self._left <= 0:
            self.stopped = True
        return self.stopped


class Connection:
    """A scripted PubSub: each get_message plays the next step (a message dict, None for a
    quiet poll that advances the clock by its timeout, or an exception to raise)."""

    def __init__(self, clock: FakeClock, steps: list[Any], after: Callable[[], None]) -> None:
        self.clock = clock
        self.steps = list(steps)
        self.after = after
        self.sent: list[str] = []
        self.closed = False

    def subscribe(self, name: str) -> None:
        self.sent.append(f"SUBSCRIBE {name}")

    def ping(self) -> None:
        self.sent.append("PING")

    def get_message(self, timeout: float) -> dict[str, Any] | None:
        if not self.steps:
            self.after()
            raise ConnectionError("the script ran out")
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        if step is None:
            self.clock.advance(timeout)
            return None
        message: dict[str, Any] = step
        return message

    def close(self) -> None:
        self.closed = True


class Backend:
    """What the listener thread sees of a backend: a connection per pubsub() call, in order."""

    def __init__(
        self, clock: FakeClock, scripts: list[list[Any]], stop: Stop, stop_at_end: bool = True
    ) -> None:
        self.connections = [Connection(clock, steps, self._end) for steps in scripts]
        self.made: list[Connection] = []
        self.heard: list[Pushed] = []
        self.live: list[bool] = []
        self._stop = stop
        self._stop_at_end = stop_at_end

    def _end(self) -> None:
        if self._stop_at_end and len(self.made) == len(self.connections):
            self._stop.stopped = True

    def pubsub(self) -> Connection:
        if len(self.made) == len(self.connections):
            raise ConnectionError("refused")
        connection = self.connections[len(self.made)]
        self.made.append(connection)
        return connection

    def listening(self, live: bool) -> None:
        self.live.append(live)

    def hear(self, pushed: Pushed) -> bool:
        self.heard.append(pushed)
        return True


def _subscribed() -> dict[str, Any]:
    return {"type": "subscribe", "channel": b"p:openings", "data": 1}


def _message(data: bytes) -> dict[str, Any]:
    return {"type": "message", "channel": b"p:openings", "data": data}


def _run(clock: FakeClock, scripts: list[list[Any]], waits: int = 100) -> tuple[Backend, Stop]:
    stop = Stop(waits)
    backend = Backend(clock, scripts, stop)
    push.run(weakref.ref(backend), stop, "p:openings", clock)
    return backend, stop


def test_each_opening_heard_reaches_the_backend_and_anything_else_is_dropped(clock):
    """Subscribed: the backend hears it is live, then each well-formed opening, in order; a
    malformed one and a message of another kind are dropped."""
    backend, _ = _run(
        clock,
        [
            [
                _subscribed(),
                _message(b"5:30000:http://a:80"),
                _message(b"nonsense"),
                {"type": "pong", "channel": None, "data": b""},
                _message(b"6:1000:http://b:80"),
            ]
        ],
    )
    assert backend.made[0].sent == ["SUBSCRIBE p:openings"]
    assert backend.heard == [Pushed("http://a:80", 5, 30_000), Pushed("http://b:80", 6, 1_000)]
    assert backend.live == [True, False]
    assert backend.made[0].closed


def test_a_quiet_connection_is_pinged_and_one_that_never_answers_replaced(clock):
    """Five quiet seconds: a PING. Two more without an answer: the connection is closed and
    the thread subscribes again on a new one, after the first, short wait."""
    quiet = [None] * 10
    backend, stop = _run(clock, [[_subscribed(), *quiet], [_subscribed()]])
    first = backend.made[0]
    assert first.sent == ["SUBSCRIBE p:openings", "PING"]
    assert first.closed
    assert backend.made[1].sent == ["SUBSCRIBE p:openings"]
    assert backend.live == [True, False, True, False]
    assert stop.waits[0] == 0.05


def test_an_answer_to_the_ping_keeps_the_connection(clock):
    """A PONG within two seconds of the PING: the same connection listens on, and pings
    again after the next five quiet seconds."""
    pong = {"type": "pong", "channel": None, "data": b""}
    backend, _ = _run(clock, [[_subscribed(), *[None] * 5, pong, *[None] * 5]])
    assert backend.made[0].sent == ["SUBSCRIBE p:openings", "PING", "PING"]
    assert len(backend.made) == 1


def test_a_subscription_never_confirmed_is_given_up_after_two_seconds(clock):
    """A Redis that takes the SUBSCRIBE but never answers (paused): after two quiet seconds
    the connection is dropped, and nothing was ever live."""
    backend, _ = _run(clock, [[None, None, None], []], waits=2)
    assert backend.made[0].closed
    assert True not in backend.live


def test_reconnects_back_off_to_a_second_and_a_heard_subscription_resets_them(clock):
    """Connections refused in a row wait 0.05, 0.1, 0.2 ... up to 1 s between tries; one
    whose subscription is heard starts the waits over."""
    stop = Stop(waits=9)
    backend = Backend(clock, [[], [], [], [], [], [_subscribed()]], stop, stop_at_end=False)
    push.run(weakref.ref(backend), stop, "p:openings", clock)
    assert stop.waits[:6] == [0.1, 0.2, 0.4, 0.8, 1.0, 0.05]
    assert stop.waits[6:] == [0.1, 0.2, 0.4]


class ClockedStop(Stop):
    """A stop event whose waits take their time on the fake clock."""

    def __init__(self, clock: FakeClock, waits: int) -> None:
        super().__init__(waits)
        self._clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        stopped = super().wait(timeout)
        assert timeout is not None
        self._clock.advance(timeout)
        return stopped


class Following(Backend):
    """A backend whose breakers follow every opening it hears."""

    def hear(self, pushed: Pushed) -> bool:
        self.heard.append(pushed)
        return True


def test_a_flood_is_read_at_a_thousand_messages_a_second_beyond_a_burst(clock):
    """The subscription's confirmation and 1,500 junk messages, all in no time: the first
    1,000 are read at once; the other 501, and the opening behind them, wait their turn, a
    thousandth of a second each, and the opening is heard."""
    stop = ClockedStop(clock, waits=10_000)
    junk = [_message(b"junk")] * 1_500
    backend = Backend(clock, [[_subscribed(), *junk, _message(b"5:30000:http://a:80")]], stop)
    push.run(weakref.ref(backend), stop, "p:openings", clock)
    paced = stop.waits[:-1]  # the last is the wait before subscribing again
    assert len(paced) == 502
    assert sum(paced) == pytest.approx(0.502)
    assert max(paced) == pytest.approx(0.001)
    assert backend.heard == [Pushed("http://a:80", 5, 30_000)]


def test_openings_followed_are_never_held_back(clock):
    """1,500 openings that the breakers follow are read as they come: no wait between them."""
    stop = ClockedStop(clock, waits=10_000)
    openings = [_message(f"{n}:30000:http://a:80".encode()) for n in range(1, 1_501)]
    backend = Following(clock, [[_subscribed(), *openings]], stop)
    push.run(weakref.ref(backend), stop, "p:openings", clock)
    assert stop.waits[:-1] == []
    assert len(backend.heard) == 1_500


def test_the_thread_ends_when_its_backend_is_collected(clock):
    """Nothing holds the backend but the test: once dropped, the thread returns at its next
    look, closing its connection, without waiting to reconnect."""
    connection = Connection(clock, [_subscribed(), None, None, None], lambda: None)

    class Alone:
        def pubsub(self) -> Connection:
            return connection

        def listening(self, live: bool) -> None:
            """Nothing to note."""

        def hear(self, pushed: Pushed) -> bool:
            """Nothing to note."""
            return False

    holder = [Alone()]
    ref: weakref.ref[push.Listener] = weakref.ref(holder[0])
    scripted = connection.get_message

    def get_message(timeout: float) -> dict[str, Any] | None:
        if len(connection.steps) == 2:
            holder.clear()
        return scripted(timeout)

    connection.get_message = get_message  # type: ignore[method-assign]
    stop = Stop()
    push.run(ref, stop, "p:openings", clock)
    assert ref() is None
    assert connection.closed
    assert stop.waits == []
