"""Unit tests run on a fake clock: a real sleep here is a bug."""

from __future__ import annotations

import time

import pytest


def _no_real_sleep(seconds: float) -> None:
    raise AssertionError(f"a real {seconds} s sleep in a unit test: use FakeClock")


@pytest.fixture(autouse=True)
def _forbid_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", _no_real_sleep)
