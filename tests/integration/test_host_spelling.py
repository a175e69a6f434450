"""A ``hosts:`` rule holds for every spelling of its host a URL may use, against a real
loopback upstream: the rule's ``max_attempts`` decides how many tries reach it."""

from __future__ import annotations

import socket

import pytest

from resilient_session import ResilientSession
from resilient_session.testing.upstream import FlakyUpstream, Reply

from .conftest import FAST_RETRY

pytestmark = pytest.mark.integration

# The defaults' tries per call, and the rule's: a spelling that escapes the rule shows 4.
DEFAULT_TRIES = 4
RULE_TRIES = 2

ADDRESS_SPELLINGS = [
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "2130706433",
    "0x7f000001",
    "0X7F000001",
    "0177.0.0.1",
    "0x7f.0.0.1",
    "127.0.0.1.",
]
NAME_SPELLINGS = ["localhost", "LOCALHOST", "localhost.", "LocalHost."]


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, 80, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return True


def _tries(upstream: FlakyUpstream, rule: str, spelling: str) -> tuple[int, int]:
    """(hits, status) of one call to *spelling* under a rule for *rule*. Where the machine
    resolves the spelling, the call goes to it; where it does not (a trailing dot with no DNS
    server about), through the upstream as the HTTP proxy, which answers it all the same: the
    session keys the call on the URL's host either way."""
    upstream.script("/item", Reply(503))
    config = {
        "defaults": {"retry": {**FAST_RETRY, "max_attempts": DEFAULT_TRIES}},
        "hosts": {rule: {"retry": {"max_attempts": RULE_TRIES}}},
    }
    with ResilientSession(config) as session:
        before = upstream.hits("/item")
        url = f"http://{spelling}:{upstream.port}/item"
        proxies = None if _resolves(spelling) else {"http": upstream.base_url}
        response = session.get(url, proxies=proxies, timeout=5)
        return upstream.hits("/item") - before, response.status_code


@pytest.mark.parametrize("spelling", ADDRESS_SPELLINGS)
def test_a_rule_for_an_address_holds_for_each_spelling_of_it(upstream, spelling):
    """A rule for 127.0.0.1 with max_attempts 2 gives a call to 127.1, 2130706433, 0x7f000001,
    an octal spelling or 127.0.0.1. exactly 2 tries, not the defaults' 4."""
    assert _tries(upstream, "127.0.0.1", spelling) == (RULE_TRIES, 503)


@pytest.mark.parametrize("spelling", NAME_SPELLINGS)
def test_a_rule_for_a_name_holds_for_each_spelling_of_it(upstream, spelling):
    """A rule for localhost holds for LOCALHOST, localhost. and LocalHost. too."""
    assert _tries(upstream, "localhost", spelling) == (RULE_TRIES, 503)


@pytest.mark.parametrize("rule", ["127.1", "0x7f000001", "127.0.0.1."])
def test_a_rule_written_in_another_spelling_holds_for_the_address(upstream, rule):
    """A rule written 127.1, 0x7f000001 or 127.0.0.1. is the rule of 127.0.0.1."""
    assert _tries(upstream, rule, "127.0.0.1") == (RULE_TRIES, 503)


def test_a_rule_for_another_address_still_does_not_apply(upstream):
    """Canonical matching adds no reach: a rule for 127.0.0.2 leaves 127.1 on the defaults."""
    assert _tries(upstream, "127.0.0.2", "127.1") == (DEFAULT_TRIES, 503)


def test_every_spelling_of_one_host_shares_its_state(upstream):
    """Calls to 127.1 and 0x7f000001 count in the one state of http://127.0.0.1:<port>."""
    upstream.script("/ok", Reply(200))
    with ResilientSession({"defaults": {"retry": FAST_RETRY}}) as session:
        for spelling in ("127.0.0.1", "127.1", "0x7f000001", "2130706433"):
            assert session.get(f"http://{spelling}:{upstream.port}/ok").status_code == 200
        health = session.health()
    assert list(health) == [f"http://127.0.0.1:{upstream.port}"]
    assert health[f"http://127.0.0.1:{upstream.port}"].calls == 4
