"""The happy path's two shortcuts across rooms, named once: which try ended well, and the
outcome the transport stamps such a try with so that the stages on its way out need not copy it
(two rows of docs/architecture.md's "Hot path").

Both run on every try, where a call would cost a frame at each site, so each site writes its
test inline, the same way everywhere, under a comment naming its rule here:

``# hot path: happy``
    ``response is not None and response.status_code < 400 and outcome.error is None``. An
    answer below 400 falls in the first row of every host's table (``_state/try_table.py``,
    ``ANSWERED_ROW``: statuses below 400 end the call whatever the tiers list), so a stage may
    judge it without the table. One with an error beside it (a body over the cap) is left to
    the table, which judges it by its status all the same.

``# hot path: answered``
    The transport hands a happy try out as :func:`answered` stamps it: decided a success
    (``ANSWERED``) with the breaker closed. The decide stage (``outcome.decision is
    ANSWERED``) and the breaker stage (``outcome.breaker is state``) find their word already
    there and return the outcome as it is instead of a copy with their word; a stage that
    finds otherwise replaces it. Pinned by ``tests/unit/pipeline/test_happy.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from resilient_session._state.breaker import BreakerState

from .attempt import ANSWERED, Outcome

if TYPE_CHECKING:
    from .wire import Answer

_new_tuple = tuple.__new__
_CLOSED = BreakerState.CLOSED


def answered(response: Answer) -> Outcome:
    """The outcome of a try *response* answered below 400, with no error: as the stages on
    its way out find it on the happy path (a success, the breaker still closed)."""
    # hot path: positional-tuples
    return _new_tuple(Outcome, (response, None, ANSWERED, None, _CLOSED, None))
