"""A prepared request one call alone holds: marked where the call makes it, taken where its
first try's headers are written, so that try writes them into it rather than into a copy.

The mark crosses from ``ResilientSession.request`` (``mark_owned``) to the requests wire's
``with_headers`` (``take_owned``) through requests' ``Session.send``, which carries the
instance dict along untouched: a grep for either name finds the other, and the ``owned`` row
of docs/architecture.md's "Hot path" both.
"""

from __future__ import annotations

from typing import Final

from requests import PreparedRequest
from requests.structures import CaseInsensitiveDict

_OWNED: Final = "_resilient_session_calls_own"


def mark_owned(prepared: PreparedRequest) -> None:
    """Mark *prepared*, made for one call and held by no one else, as that call's own: its
    first try may write its headers into it. Only headers requests made itself are marked:
    their store is the one ``with_headers`` writes to."""
    if type(prepared.headers) is CaseInsensitiveDict:
        prepared.__dict__[_OWNED] = True


def take_owned(request: PreparedRequest) -> bool:
    """Whether *request* carries ``mark_owned``'s mark, taking it off: one try writes into it,
    and every later one into a copy."""
    # Only True is ever stored, so the popped value is the answer.
    # hot path: owned
    owned: bool = request.__dict__.pop(_OWNED, False)
    return owned
