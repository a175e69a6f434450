"""The library's own exceptions: the requests types they refine, and a chain that never prints."""

from __future__ import annotations

import pickle
import threading
import traceback

import pytest
import requests

from resilient_session import (
    CircuitOpenError,
    ConcurrencyLimitError,
    DeadlineExceeded,
    ResponseTooLarge,
    ThrottledError,
)

ALL = (DeadlineExceeded, CircuitOpenError, ThrottledError, ConcurrencyLimitError, ResponseTooLarge)


@pytest.mark.parametrize(
    ("kind", "refines"),
    [
        (DeadlineExceeded, requests.Timeout),
        (CircuitOpenError, requests.ConnectionError),
        (ThrottledError, CircuitOpenError),
        (ConcurrencyLimitError, CircuitOpenError),
        (ResponseTooLarge, requests.RequestException),
    ],
)
def test_each_is_still_the_requests_type_it_refines(kind, refines):
    """Each exception is caught by the requests type it refines, and by RequestException."""
    assert issubclass(kind, refines)
    assert issubclass(kind, requests.RequestException)


@pytest.mark.parametrize("kind", ALL)
def test_raised_while_handling_another_it_prints_alone(kind):
    """Raised inside an except block, the exception keeps its original but prints without the
    exception being handled, whose text may quote a whole URL."""
    handled = requests.ConnectTimeout("Max retries exceeded with url: /p?token=tok-s3cret")

    def fail() -> None:
        try:
            raise handled
        except requests.ConnectTimeout as exc:
            raise kind("deadline for GET http://h.test:80 ran out", original=exc)  # noqa: B904

    with pytest.raises(kind) as caught:
        fail()
    text = "".join(traceback.format_exception(caught.value))
    assert "tok-s3cret" not in text
    assert text.count("Traceback (most recent call last)") == 1
    assert caught.value.original is handled
    assert caught.value.__cause__ is None


@pytest.mark.parametrize("kind", ALL)
def test_original_defaults_to_none(kind):
    """A refusal made before any try has no original."""
    assert kind("refused").original is None


def test_pickled_copy_keeps_message_and_request_without_the_original():
    """A pickled exception (a process pool's result) keeps its message and request; its
    original, which may hold a connection that cannot be pickled, is left behind."""
    request = requests.Request("GET", "http://h.test/p").prepare()
    unpicklable = requests.ConnectTimeout(threading.Lock())
    error = DeadlineExceeded("deadline ran out", request=request, original=unpicklable)
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert type(copy) is DeadlineExceeded
    assert copy.args == ("deadline ran out",)
    assert isinstance(copy.request, requests.PreparedRequest)
    assert (copy.request.url, copy.original) == (request.url, None)
    assert error.original is unpicklable


def test_pickled_response_too_large_leaves_its_response_behind():
    """A pickled ResponseTooLarge keeps its message, cap and request; its response, whose
    pickling would read the body the cap refused, is left behind."""
    request = requests.Request("GET", "http://h.test/p").prepare()
    response = requests.Response()
    response.request = request
    error = ResponseTooLarge("too large", limit=10, response=response, request=request)
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert (type(copy), copy.args, copy.limit, copy.response) == (
        ResponseTooLarge,
        ("too large",),
        10,
        None,
    )
    assert isinstance(copy.request, requests.PreparedRequest)
    assert error.response is response
