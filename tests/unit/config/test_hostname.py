"""The canonical spelling of a host, and host rules matched on it."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resilient_session import ConfigError
from resilient_session._state import registry as registry_module
from resilient_session._state.registry import HostRegistry, host_key
from resilient_session.config import load
from resilient_session.config.hostname import canonical_host


@pytest.mark.parametrize(
    ("host", "canonical"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("127.1.", "127.0.0.1"),
        ("localhost.", "localhost"),
        ("API.Example.COM.", "api.example.com"),
        ("api.example.com", "api.example.com"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("::0001", "::1"),
        ("FE80:0::A", "fe80::a"),
        ("1.2.3.256", "1.2.3.256"),  # no address: a name, as the resolver reads it
        ("cafe", "cafe"),
        ("127.0.0.1 x", "127.0.0.1 x"),  # glibc's inet_aton reads past a space; no host has one
        (".", "."),
        ("", ""),
    ],
)
def test_canonical_host(host, canonical):
    """Every IPv4 spelling inet_aton reads is its dotted quad, IPv6 is compressed, names lose
    their case and trailing dot, and what is none of these stays as it is."""
    assert canonical_host(host) == canonical


@given(st.text(alphabet="0123456789abcdefx.", min_size=1, max_size=24))
def test_an_ipv4_spelling_is_what_the_platform_resolver_reads(text):
    """A spelling the platform's inet_aton reads becomes the address it reads; one it does
    not read stays a name."""
    try:
        address: str | None = socket.inet_ntoa(socket.inet_aton(text.rstrip(".") or text))
    except OSError:
        address = None
    canonical = canonical_host(text)
    assert canonical == (address if address is not None else (text.rstrip(".") or text))


def test_host_key_is_canonical():
    """Every spelling of 127.0.0.1 keys the same state, its userinfo and case dropped too."""
    keys = {
        host_key(f"http://{spelling}:8080/x")
        for spelling in ("127.0.0.1", "127.1", "2130706433", "0x7f000001", "127.0.0.1.")
    }
    assert keys == {("http://127.0.0.1:8080", "127.0.0.1", 8080)}
    assert host_key("https://u:p@[0:0::1]/") == ("https://[::1]:443", "::1", 443)


def test_rules_match_on_the_canonical_host():
    """A rule written for 127.0.0.1 applies to 127.1; one written 0x7f000001 to 127.0.0.1;
    one for api.test to API.test.; wildcards see the canonical host too."""
    config = load(
        {
            "hosts": {
                "127.0.0.1": {"retry": {"max_attempts": 2}},
                "0x0a000001": {"retry": {"max_attempts": 3}},
                "api.test.": {"retry": {"max_attempts": 5}},
                "192.168.0.*": {"retry": {"max_attempts": 6}},
            }
        }
    )
    tries = {
        host: config.for_host(host, 80).retry.max_attempts
        for host in ("127.1", "10.0.0.1", "10.1", "API.test.", "192.168.1", "0xc0a80007")
    }
    assert tries == {
        "127.1": 2,
        "10.0.0.1": 3,
        "10.1": 3,
        "API.test.": 5,
        "192.168.1": 6,
        "0xc0a80007": 6,
    }


def test_two_spellings_of_one_host_are_one_host_key_twice():
    """Two hosts: keys that spell one address are refused, naming both."""
    with pytest.raises(ConfigError) as caught:
        load({"hosts": {"127.0.0.1": {}, "127.1": {}}})
    assert str(caught.value) == 'hosts."127.1": names the same host as hosts."127.0.0.1"'


def test_the_registry_canonicalises_a_spelling_once(clock, monkeypatch):
    """A host already seen is found again without canonicalising it anew, in whichever
    order its spellings come: the per-origin cache holds the canonical key."""
    seen: list[str] = []

    def counted(host: str) -> str:
        seen.append(host)
        return canonical_host(host)

    monkeypatch.setattr(registry_module, "canonical_host", counted)
    registry = HostRegistry(load({}), clock=clock)
    first = registry.for_url("http://0x7f000001:6081/a")
    for url in ["http://127.0.0.1:6081/b", "http://0x7f000001:6081/c"] * 3:
        assert registry.for_url(url) is first
    assert (first.key, seen) == ("http://127.0.0.1:6081", ["0x7f000001", "127.0.0.1"])
