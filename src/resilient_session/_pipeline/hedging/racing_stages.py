"""The racing chains: the two stages only they have, and their composition from the standard
slots by name. The try joining its call's race sits in slot "race", just inside "deadline";
the events stage that tells a try that lost as cancelled replaces slot "events"."""

from __future__ import annotations

import logging

from resilient_session._observe.events import logger_for
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.drive import Next, TryStage
from resilient_session._pipeline.slots import Slots
from resilient_session._pipeline.stages import standard_slots
from resilient_session._pipeline.stages.guards import compose_folded
from resilient_session._pipeline.stages.try_record import try_record

from .race import RACE
from .timer import real_monotonic

_INFO = logging.INFO
_current_race = RACE.get


def race_try(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Send the try as one of its call's race, or not at all once another try answered.

    Inside every guard and the deadline stage, so only a try that is really going out joins
    the race (and starts its clock), and outside the send stage, so a try that will not go
    out is never told to the send hooks. The try runs under a bound of its own, which the race
    can cut from another thread; it ends at the deadline stage's instant, and a try it cut
    there is handed back to that stage as its own bound's cut. A try that lost comes back as
    refused for the guards: neither a success nor a failure, and no try for their counts.
    """
    race = _current_race()
    if race is None:  # pragma: no cover - a racing chain always runs inside its race
        return call_next(attempt)
    number = attempt.number
    bound = attempt.call.wire.raced()
    if not race.sending(number, bound):
        return race.cancelled(attempt)
    started = real_monotonic()
    try:
        with bound:
            outcome = call_next(attempt)
    finally:
        won = race.answered(number, real_monotonic() - started, bound.fired)
    if not won:
        response = outcome.response
        if response is not None:
            response.close()  # its connection was cut, or its body read: never the caller's
        return race.cancelled(attempt)
    bound.pass_on()  # no one cuts a winner: a bound of its that fired, fired at the deadline
    return outcome


def racing_events(*, hedge: bool, hooks: bool) -> TryStage:
    """The events stage of a racing chain: as ``stages/events.py``'s, with ``hedge`` set on
    each try of the hedge chain, and a try that lost told as ``cancelled`` (``hedge_lost``)."""

    def emit_race_events(attempt: Attempt, call_next: Next, /) -> Outcome:
        runtime = attempt.call.runtime
        clock = runtime.clock
        started = clock.monotonic()
        outcome = call_next(attempt)
        race = _current_race()
        if race is not None:
            outcome = race.settled(attempt, outcome)
        logger = logger_for(_INFO)
        if logger is None and not hooks:
            return outcome  # a try no one logs costs no record
        record = try_record(attempt, outcome, started, clock.monotonic(), runtime.redact, hedge)
        if logger is not None:
            logger.info("http.try", **record.event_fields())
        if hooks:
            for hook in runtime.hooks:
                hook.on_try(record)
        return outcome

    return emit_race_events


def racing_slots(*, hedge: bool, hooks: bool = False, senders: bool = False) -> Slots:
    """The slots of one try of a hedged call's race: the standard ones, the events stage told
    which tries lost (and, with *hedge*, that each is a hedge), and the try joining the race
    inside the deadline stage, so only a try that goes out joins it."""
    return (
        standard_slots(hooks=hooks, senders=senders)
        .replaced("events", racing_events(hedge=hedge, hooks=hooks))
        .inserted_after("deadline", "race", race_try)
    )


def racing_stages(*, hedge: bool, hooks: bool = False, senders: bool = False) -> list[TryStage]:
    """The stages of ``racing_slots``, outermost first."""
    return racing_slots(hedge=hedge, hooks=hooks, senders=senders).stages()


def racing_chain(transport: Next, *, hedge: bool, hooks: bool, senders: bool) -> Next:
    """The racing stages composed around *transport*: with *hedge*, the chain each hedge goes
    through; else the one a raced call's first try does. The guards run folded as in the
    standard chain (``stages/guards.py``): a hedged call's first try, admitted at once, pays
    for one frame of them rather than five."""
    return compose_folded(racing_slots(hedge=hedge, hooks=hooks, senders=senders), transport)
