"""redacting_request_hook: the URL on the requests instrumentation's span, as the library
redacts its own, whichever attribute names the span carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from resilient_session import redacting_request_hook

URL = "http://user:pw@svc.test/items?token=t0k&tenant=acme&page=2#part"


@dataclass
class SdkSpan:
    """A recording span that shows its attributes, as the SDK's does."""

    attributes: dict[str, Any] = field(default_factory=dict)
    recording: bool = True

    def is_recording(self) -> bool:
        return self.recording

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value


class OpaqueSpan:
    """A recording span that keeps its attributes to itself."""

    def __init__(self) -> None:
        self.written: dict[str, Any] = {}

    def is_recording(self) -> bool:
        return True

    def set_attribute(self, key: str, value: Any) -> None:
        self.written[key] = value


def _prepared(url: str) -> requests.PreparedRequest:
    return requests.Request("GET", url).prepare()


@pytest.mark.parametrize(
    "keys", [("url.full",), ("http.url",), ("url.full", "http.url")], ids=["stable", "old", "dup"]
)
def test_each_url_key_the_span_carries_is_redacted(keys):
    """Every URL key the instrumentation wrote is rewritten, and no other key is added."""
    span = SdkSpan(dict.fromkeys(keys, URL) | {"http.request.method": "GET"})
    redacting_request_hook()(span, _prepared(URL))
    assert span.attributes == dict.fromkeys(
        keys, "http://svc.test/items?token=REDACTED&tenant=acme&page=2"
    ) | {"http.request.method": "GET"}


def test_the_configs_extra_names_are_redacted_too():
    """Names given to the hook, as events.redact_params, are hidden beside the built-in ones,
    whatever their case."""
    span = SdkSpan({"url.full": URL})
    redacting_request_hook(frozenset({"Tenant"}))(span, _prepared(URL))
    assert span.attributes == {
        "url.full": "http://svc.test/items?token=REDACTED&tenant=REDACTED&page=2"
    }


def test_a_span_that_hides_its_attributes_gets_both_names():
    """On a span whose attributes cannot be read, both URL keys are written, so neither the
    stable nor the old convention's value can keep the secret."""
    span = OpaqueSpan()
    redacting_request_hook()(span, _prepared(URL))
    redacted = "http://svc.test/items?token=REDACTED&tenant=acme&page=2"
    assert span.written == {"url.full": redacted, "http.url": redacted}


def test_a_span_not_recording_or_a_request_without_url_is_left_alone():
    """A sampled-out span is not written to, nor a span for a request with no URL."""
    quiet = SdkSpan({"url.full": URL}, recording=False)
    redacting_request_hook()(quiet, _prepared(URL))
    no_url = SdkSpan({"url.full": URL})
    redacting_request_hook()(no_url, requests.PreparedRequest())
    assert (quiet.attributes, no_url.attributes) == ({"url.full": URL}, {"url.full": URL})


def test_a_url_with_nothing_to_hide_is_written_as_sent():
    """A URL with no userinfo, fragment or secret reaches the span unchanged."""
    plain = "http://svc.test/items?page=2"
    span = SdkSpan({"url.full": plain})
    redacting_request_hook()(span, _prepared(plain))
    assert span.attributes == {"url.full": plain}
