"""A prepared request one call alone holds: marked where the call makes it, taken where its
first try's headers are written, so that try writes them into it rather than into a copy.

The mark crosses from ``ResilientSession.request`` (``mark_owned``) to the requests wire's
``with_header`` and ``with_headers`` (``take_owned``) through requests' ``Session.send``, which
carries the request's attributes along untouched: a grep for either name finds the other, and
the ``owned`` row of docs/architecture.md's "Hot path" both.

The mark is an attribute set and deleted by name, not a key of ``request.__dict__``: asking
for the instance dict makes the interpreter build one where the attributes were kept inline,
and a name it has not seen on the class turns that dict into a table of its own, about 900
instructions a call between the two.
"""

from __future__ import annotations

from requests import PreparedRequest
from requests.structures import CaseInsensitiveDict


def mark_owned(prepared: PreparedRequest) -> None:
    """Mark *prepared*, made for one call and held by no one else, as that call's own: its
    first try may write its headers into it. Only headers requests made itself are marked:
    their store is the one ``with_headers`` writes to."""
    if type(prepared.headers) is CaseInsensitiveDict:
        prepared._resilient_session_calls_own = True  # type: ignore[attr-defined]  # the mark


def take_owned(request: PreparedRequest) -> bool:
    """Whether *request* carries ``mark_owned``'s mark, taking it off: one try writes into it,
    and every later one into a copy."""
    # Only True is ever stored, and the mark is deleted as it is taken.
    # hot path: owned
    if getattr(request, "_resilient_session_calls_own", False):
        del request._resilient_session_calls_own  # type: ignore[attr-defined]  # the mark
        return True
    return False
