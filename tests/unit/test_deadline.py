"""The deadline context manager: nesting, None, and what each call sees."""

from __future__ import annotations

import contextvars
import threading

import pytest

from resilient_session.deadline import current_scope, deadline, remaining


def test_nested_keeps_the_earliest(clock):
    """An inner, later deadline does not extend the outer one; an earlier one shortens it."""
    with deadline(2.0, clock=clock):
        with deadline(10.0, clock=clock):
            assert remaining(clock=clock) == 2.0
        with deadline(0.5, clock=clock):
            assert remaining(clock=clock) == 0.5
        assert remaining(clock=clock) == 2.0
    assert remaining(clock=clock) is None


def test_none_switches_off_the_configured_default(clock):
    """deadline(None) adds no deadline but marks the config default as not to be used."""
    with deadline(None, clock=clock):
        scope = current_scope()
        assert scope is not None
        assert (scope.at, scope.use_default) == (None, False)
    with deadline(3.0, clock=clock), deadline(None, clock=clock):
        scope = current_scope()
        assert scope is not None
        assert (scope.at, scope.use_default) == (clock.now + 3.0, False)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_bad_deadline_rejected(clock, bad):
    """A deadline must be a positive number of seconds."""
    with pytest.raises(ValueError, match="positive number of seconds"), deadline(bad, clock=clock):
        pass


def test_new_thread_does_not_inherit(clock):
    """A new thread starts without the deadline unless the context is copied."""
    seen: dict[str, float | None] = {}
    with deadline(2.0, clock=clock):
        plain = threading.Thread(target=lambda: seen.update(plain=remaining(clock=clock)))
        context = contextvars.copy_context()
        copied = threading.Thread(
            target=lambda: context.run(lambda: seen.update(copied=remaining(clock=clock)))
        )
        plain.start()
        copied.start()
        plain.join(timeout=5)
        copied.join(timeout=5)
    assert seen == {"plain": None, "copied": 2.0}


def test_config_default_deadline_applies(harness, clock):
    """deadline.default bounds a call that gives none and sets the header."""
    _, transport = harness({"defaults": {"deadline": {"default": 1.5}}}).run(200)
    assert transport.sent[0].request.headers["X-Request-Timeout-Ms"] == "1500"


def test_caller_deadline_earlier_than_default_wins(harness, clock):
    """The earliest of the caller's deadline and the config default wins."""
    _, transport = harness({"defaults": {"deadline": {"default": 5}}}).run(200, deadline=0.25)
    assert transport.sent[0].request.headers["X-Request-Timeout-Ms"] == "250"


def test_header_name_configurable_and_can_be_off(harness):
    """deadline.header renames the header; null sends none."""
    _, renamed = harness({"defaults": {"deadline": {"header": "Grpc-Timeout-Ms"}}}).run(
        200, deadline=1.0
    )
    assert renamed.sent[0].request.headers["Grpc-Timeout-Ms"] == "1000"
    _, silent = harness({"defaults": {"deadline": {"header": None}}}).run(200, deadline=1.0)
    assert "X-Request-Timeout-Ms" not in silent.sent[0].request.headers
    assert silent.sent[0].timeout == (1.0, 1.0)
