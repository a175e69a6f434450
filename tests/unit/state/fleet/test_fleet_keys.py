"""A host's keys: one slot per host in a Redis Cluster, whatever the host key holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from resilient_session._state.fleet.keys import hash_tag, host_keys

PREFIX = "resilient-session:"
HOSTILE = ["a}{b", "{", "}", "{}", "}{", "%7B", "%", "", "http://{evil}:80", "http://x}:1"]


def _slot(key: str) -> int:
    return int(key_slot(key.encode()))


def _tag(key: str) -> str:
    """What Redis Cluster hashes: from the first '{' to the first '}' after it."""
    start = key.index("{")
    return key[start + 1 : key.index("}", start + 1)]


def test_without_a_tag_the_keys_are_those_of_a_single_redis():
    """Single and sentinel mode keep today's names: prefix + host key + suffix."""
    assert host_keys(PREFIX, "https://api.example.com:443") == (
        "resilient-session:https://api.example.com:443:breaker",
        "resilient-session:https://api.example.com:443:budget",
        "resilient-session:https://api.example.com:443:throttle",
        "resilient-session:https://api.example.com:443:workers",
    )


def test_a_tagged_host_key_is_readable_and_all_four_share_its_slot():
    keys = host_keys(PREFIX, "https://api.example.com:443", tagged=True)
    assert keys[0] == "resilient-session:{https://api.example.com:443}:breaker"
    assert {_slot(key) for key in keys} == {_slot("{https://api.example.com:443}")}


@pytest.mark.parametrize("host", HOSTILE)
def test_a_hostile_host_key_stays_inside_its_own_tag(host):
    """Braces and percent signs are percent-encoded: the tag Redis hashes is the whole
    encoded host key, never empty, and all four keys are in its slot."""
    keys = host_keys(PREFIX, host, tagged=True)
    tag = hash_tag(host)
    assert tag.count("{") == tag.count("}") == 1
    assert all(_tag(key) == tag[1:-1] != "" for key in keys)
    assert {_slot(key) for key in keys} == {_slot(tag)}


def test_hostile_host_keys_get_tags_of_their_own():
    """No two host keys share a tag: one cannot land in another's keys."""
    tags = [hash_tag(host) for host in HOSTILE]
    assert len(set(tags)) == len(tags)
    assert hash_tag("a}{b") == "{a%7D%7Bb}"
    assert hash_tag("a%7D%7Bb") == "{a%257D%257Bb}"


@given(st.text(max_size=40), st.text(max_size=40))
def test_the_tag_is_one_to_one_and_closed(first, second):
    """Distinct host keys, distinct tags; each tag holds exactly one '{' and one '}'."""
    assert (hash_tag(first) == hash_tag(second)) == (first == second)
    keys = host_keys(PREFIX, first, tagged=True)
    assert {_tag(key) for key in keys} == {hash_tag(first)[1:-1]}
    assert len({_slot(key) for key in keys}) == 1
