"""The happy path's shortcuts across rooms (``_pipeline/happy.py``): the transport's stamp on
an answer below 400 is what decide and the breaker would write, so both hand it on as it is,
and every stage writes the happy test one way."""

from __future__ import annotations

import re
from pathlib import Path

import requests

import resilient_session._pipeline
from resilient_session._pipeline.attempt import ANSWERED, Outcome
from resilient_session._pipeline.happy import answered
from resilient_session._pipeline.stages.breaker import guard_with_breaker
from resilient_session._pipeline.stages.decide import decide_tries
from resilient_session._state.breaker import BreakerState

PIPELINE = Path(resilient_session._pipeline.__file__).resolve().parent
HAPPY = "response is not None and response.status_code < 400 and outcome.error is None"


def _ok() -> requests.Response:
    response = requests.Response()
    response.status_code = 204
    return response


def test_answered_stamps_a_success_with_the_breaker_closed():
    """answered() holds the answer, no error, decide's success and a closed breaker, each
    under its own name, and nothing else."""
    response = _ok()
    assert answered(response)._asdict() == {
        "response": response,
        "error": None,
        "decision": ANSWERED,
        "refused": None,
        "breaker": BreakerState.CLOSED,
        "fallback": None,
    }


def test_decide_and_the_breaker_hand_the_stamped_outcome_on_uncopied(harness):
    """A happy try the transport stamped leaves the breaker stage and the decide stage as
    the very same outcome: neither finds anything to change."""
    attempt = harness().first_attempt()
    stamped = answered(_ok())

    after_breaker = guard_with_breaker(attempt, lambda _: stamped)
    after_decide = decide_tries(attempt, lambda _: after_breaker)

    assert (after_breaker is stamped, after_decide is stamped) == (True, True)


def test_an_unstamped_happy_answer_is_stamped_the_same_by_the_stages(harness):
    """An answer below 400 that reaches them unstamped (a scripted transport's) comes out of
    the breaker and decide stages equal to the stamp, in a copy."""
    attempt = harness().first_attempt()
    response = _ok()
    plain = Outcome(response)

    after_breaker = guard_with_breaker(attempt, lambda _: plain)
    after_decide = decide_tries(attempt, lambda _: after_breaker)

    assert after_decide == answered(response)
    assert after_decide is not plain


def test_every_stage_writes_the_happy_test_one_way():
    """Each happy-path test in the pipeline reads the same expression, so none judges a try
    the table judges otherwise: five sites, in decide, breaker, throttle, limit and the
    guards folded (guards.py), and one their async twins share (aio/stages.py)."""
    assert HAPPY in (PIPELINE / "happy.py").read_text(encoding="utf-8")  # the rule, named
    sites: dict[str, list[str]] = {}
    for path in sorted(PIPELINE.rglob("*.py")):
        if path.name == "happy.py":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"status_code\s*<\s*400", line):
                sites.setdefault(path.stem, []).append(line.strip())
    assert sorted(sites) == ["breaker", "decide", "guards", "limit", "stages", "throttle"]
    for lines in sites.values():
        assert all(HAPPY in line for line in lines), lines
