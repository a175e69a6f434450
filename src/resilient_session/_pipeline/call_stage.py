"""The per-call level of the pipeline: call stages, the run they wrap (a call's first try, then
its retries on the per-try chain) and their composition into a call chain.

A call stage runs once per call, around every try of it: it sees the call before its first try
and the final outcome after its last, which no try stage can (a try stage runs once per try
and sees one try's outcome). Hedging is one: it races a call's first try and resumes the call
from the race's last try number. Only ``drive.resume`` loops over tries, at either level.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .attempt import Attempt, Call, Outcome, Verdict, first_attempt
from .drive import Next, resume

_RETRY = Verdict.RETRY


class Run(Protocol):
    """What a call stage is handed: the rest of the call chain, and the per-try chain to go on
    with after a try of its own."""

    def __call__(self, call: Call, /) -> Outcome:
        """Run *call* through the stages inside, to its final outcome."""

    def resume(self, attempt: Attempt, outcome: Outcome, /) -> Outcome:
        """Go on from *attempt*, which ended in *outcome*, on the per-try chain: a retry while
        the decision says so, *outcome* itself when it is final."""


class CallStage(Protocol):
    """One stage of the call chain: runs once per call, around the stages inside it."""

    def __call__(self, call: Call, run: Run, /) -> Outcome: ...


def first_and_retries(chain: Next, call: Call) -> Outcome:
    """*call*'s first try on the per-try *chain*, then its retries while the decision says so:
    the innermost run. ``ResilientAdapter.send`` and ``ResilientTransport.handle_request`` call
    it directly when no call stage is configured (the call chain would be ``Tries`` alone)."""
    first = first_attempt(call)
    outcome = chain(first)
    if outcome.decision.verdict is _RETRY:
        outcome = resume(chain, first, outcome)
    return outcome


class Tries:
    """The innermost run as the call chain holds it: ``first_and_retries`` on *chain*."""

    __slots__ = ("chain",)

    def __init__(self, chain: Next) -> None:
        self.chain = chain

    def __call__(self, call: Call, /) -> Outcome:
        return first_and_retries(self.chain, call)

    def resume(self, attempt: Attempt, outcome: Outcome, /) -> Outcome:
        return resume(self.chain, attempt, outcome)


class _CallLink:
    """*stage* around the *inner* run; a resume goes to the per-try chain, past every stage."""

    __slots__ = ("_inner", "_stage", "resume")

    def __init__(self, stage: CallStage, inner: Run) -> None:
        self._stage = stage
        self._inner = inner
        self.resume = inner.resume

    def __call__(self, call: Call, /) -> Outcome:
        return self._stage(call, self._inner)


def compose_calls(stages: Sequence[CallStage], tries: Tries) -> Run:
    """Chain the call *stages* around *tries*; the first one is the outermost."""
    run: Run = tries
    for stage in reversed(stages):
        run = _CallLink(stage, run)
    return run
