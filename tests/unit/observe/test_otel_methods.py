"""The methods the OpenTelemetry emitter tells as they are: the semantic conventions' nine, or
the whole list OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS gives instead."""

from __future__ import annotations

import pytest

from resilient_session._observe.otel import KNOWN_METHODS, KNOWN_METHODS_VARIABLE, known_methods


def test_the_default_list_is_rfc_9110_and_patch():
    """Without the variable: RFC 9110's eight methods and PATCH, upper case, nothing else."""
    assert known_methods({}) == KNOWN_METHODS
    assert sorted(KNOWN_METHODS) == [
        "CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("given", "known"),
    [
        ("PURGE,GET", {"PURGE", "GET"}),
        (" PURGE , GET ,", {"PURGE", "GET"}),
        ("get", {"get"}),  # case-sensitive, as the conventions say
        ("", KNOWN_METHODS),
        (" , ", KNOWN_METHODS),
    ],
)
def test_the_variable_replaces_the_whole_list(given, known):
    """A list given replaces the default (it adds nothing to it); an empty one is no list."""
    assert known_methods({KNOWN_METHODS_VARIABLE: given}) == known
