"""The state seam: the events first, then each hook that watches that kind of change."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from resilient_session._observe.hooks import BackendChange, StateChange, TryRecord
from resilient_session._observe.state_report import EVENTS_ONLY, StateReport
from resilient_session._state.breaker import BreakerState, Transition


class _Transitions:
    """A state hook without on_state."""

    def __init__(self, heard: list[Any]) -> None:
        self.heard = heard

    def on_try(self, record: TryRecord, /) -> None:
        """Not watched."""

    def on_transition(self, change: StateChange, /) -> None:
        self.heard.append(("transition", change.to_state.value))


class _Everything(_Transitions):
    """A backend hook."""

    def on_state(self, change: BackendChange, /) -> None:
        self.heard.append(("state", change.event))


_DEGRADED = BackendChange("state.degraded", "redis", "redis://127.0.0.1:1/0", (("error", "E"),))


def test_with_no_hook_the_seam_logs_the_events_unchanged() -> None:
    """The default seam logs breaker.transition and state.* with today's fields."""
    change = Transition("http://a:80", BreakerState.CLOSED, BreakerState.OPEN, seq=3)
    with capture_logs() as logs:
        EVENTS_ONLY.tell([change, _DEGRADED])
    assert logs == [
        {"event": "breaker.transition", "log_level": "warning", "host": "http://a:80",
         "route": None, "seq": 3, "from": "closed", "to": "open"},
        {"event": "state.degraded", "log_level": "warning", "backend": "redis",
         "url": "redis://127.0.0.1:1/0", "error": "E"},
    ]  # fmt: skip


def test_each_hook_hears_only_the_changes_it_watches() -> None:
    """A StateHook hears the transition alone; a BackendHook hears both, in order."""
    heard: list[Any] = []
    report = StateReport([_Transitions(heard), _Everything(heard), object()])
    change = Transition("http://a:80", BreakerState.OPEN, BreakerState.CLOSED, seq=1)
    report.tell([change, _DEGRADED])
    assert heard == [
        ("transition", "closed"),
        ("transition", "closed"),
        ("state", "state.degraded"),
    ]


def test_a_hook_that_raises_costs_the_other_changes_nothing():
    """On the sync thread: the first change's hook raises, the second change still reaches it."""
    from resilient_session._observe.state_report import StateReport
    from resilient_session._state.breaker import BreakerState, Transition

    heard: list[int] = []

    class Flaky:
        def on_transition(self, change: StateChange) -> None:
            heard.append(change.seq)
            if change.seq == 1:
                raise RuntimeError("a hook's own bug")

    report = StateReport([Flaky()])
    changes = [
        Transition("http://a.test:80", BreakerState.CLOSED, BreakerState.OPEN, seq)
        for seq in (1, 2)
    ]
    report.tell(changes)
    assert heard == [1, 2]
