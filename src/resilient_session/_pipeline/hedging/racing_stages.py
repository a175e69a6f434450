"""The racing chains' stages, built from the standard slots by name: the events stage that
tells a try that lost as cancelled in slot "events", and the try joining its call's race in
slot "race", just inside "deadline" (the two stages are in ``stages.py``)."""

from __future__ import annotations

from resilient_session._pipeline.drive import Next, TryStage, compose
from resilient_session._pipeline.slots import Slots
from resilient_session._pipeline.stages import standard_slots

from .stages import race_try, racing_events


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
    through; else the one a raced call's first try does."""
    return compose(racing_stages(hedge=hedge, hooks=hooks, senders=senders), transport)
