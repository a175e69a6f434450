"""Named slots: the standard chain's stages by name, and the racing chains built from them by
name, so a stage added to the standard slots lands in the racing ones at its place."""

from __future__ import annotations

from types import FunctionType

import pytest

import resilient_session._pipeline.hedging.racing_stages as racing
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.hedging.racing_stages import race_try
from resilient_session._pipeline.slots import Slots
from resilient_session._pipeline.stages import standard_slots, standard_stages
from resilient_session._pipeline.stages.deadline import enforce_deadline
from resilient_session._pipeline.stages.events import emit_events, emit_events_and_tell
from resilient_session._pipeline.stages.send import tell_senders

RACING_EVENTS = "racing_events.<locals>.emit_race_events"
STANDARD = ["events", "budget", "decide", "breaker", "throttle", "limit", "deadline"]


def _stage(name: str):
    def stage(attempt: Attempt, call_next: Next, /) -> Outcome:
        return call_next(attempt)

    stage.__name__ = name
    return stage


def _is_racing_events(stage: object) -> bool:
    return isinstance(stage, FunctionType) and stage.__qualname__ == RACING_EVENTS


def test_the_standard_slots_are_named_in_nesting_order():
    """Seven slots, events outermost and deadline innermost; the send stage goes last, and
    the events stage tells the hooks, only when asked."""
    plain = standard_slots()
    assert (plain.names(), plain["events"], plain["deadline"]) == (
        STANDARD,
        emit_events,
        enforce_deadline,
    )
    told = standard_slots(hooks=True, senders=True)
    assert (told.names(), told["events"], told["send"]) == (
        [*STANDARD, "send"],
        emit_events_and_tell,
        tell_senders,
    )
    assert standard_stages(hooks=True, senders=True) == told.stages()


def test_replacing_a_slot_keeps_its_place_and_leaves_the_original_as_it_was():
    """ "b" replaced: the new stage is second, and the slots it came from still hold the old."""
    a, b, c, other = _stage("a"), _stage("b"), _stage("c"), _stage("other")
    slots = Slots([("a", a), ("b", b), ("c", c)])
    replaced = slots.replaced("b", other)
    assert (replaced.names(), replaced.stages()) == (["a", "b", "c"], [a, other, c])
    assert slots.stages() == [a, b, c]


def test_a_slot_inserted_after_another_lands_just_inside_it():
    """ "x" after "a" is second of four, whatever follows "a"."""
    a, b, c, x = _stage("a"), _stage("b"), _stage("c"), _stage("x")
    slots = Slots([("a", a), ("b", b), ("c", c)]).inserted_after("a", "x", x)
    assert (slots.names(), slots.stages()) == (["a", "x", "b", "c"], [a, x, b, c])


def test_a_slot_that_is_not_there_fails_the_build():
    """Replacing or inserting after a missing slot raises KeyError naming it and the slots
    there are; a name already taken raises ValueError."""
    slots = Slots([("a", _stage("a"))])
    with pytest.raises(KeyError, match=r"no slot named 'gone' in \['a'\]"):
        slots.replaced("gone", _stage("x"))
    with pytest.raises(KeyError, match=r"no slot named 'gone' in \['a'\]"):
        slots.inserted_after("gone", "x", _stage("x"))
    with pytest.raises(ValueError, match="a slot named 'a' is already in the chain"):
        slots.inserted_after("a", "a", _stage("x"))


def test_the_racing_slots_replace_events_and_put_the_race_inside_the_deadline():
    """The racing chains: every standard slot in its place, the events one told of lost
    tries, and the race between deadline and send."""
    slots = racing.racing_slots(hedge=False, senders=True)
    assert slots.names() == [*STANDARD, "race", "send"]
    assert slots["race"] is race_try
    assert slots["events"] is not standard_slots()["events"]
    assert _is_racing_events(slots["events"])


@pytest.mark.parametrize("hedge", [False, True])
def test_a_stage_added_to_the_standard_slots_lands_in_the_racing_chains_at_its_place(
    monkeypatch, hedge
):
    """A new slot outermost, and another just outside the deadline: both racing chains have
    them at the same places, and the race still just inside the deadline."""
    first, late = _stage("first"), _stage("late")

    def grown(*, hooks: bool = False, senders: bool = False) -> Slots:
        base = standard_slots(hooks=hooks, senders=senders)
        named = [("first", first), *zip(base.names(), base.stages(), strict=True)]
        return Slots(named).inserted_after("limit", "late", late)

    monkeypatch.setattr(racing, "standard_slots", grown)
    slots = racing.racing_slots(hedge=hedge)
    assert slots.names() == ["first", *STANDARD[:6], "late", "deadline", "race"]
    assert (slots["first"], slots["late"], slots["race"]) == (first, late, race_try)
    assert _is_racing_events(slots["events"])
    assert racing.racing_stages(hedge=hedge)[0] is first
