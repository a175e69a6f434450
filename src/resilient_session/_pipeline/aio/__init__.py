"""The async twin of the per-try level: an awaited drive and async stages, each thin glue
around the same decisions (``decide``, the table's meaning, ``refuse``) and the same state
calls as its sync stage, so a call made in a task and one made in a thread move the same
breaker, budget, throttle and limit.

The async rules: a wait is ``await``-ed on the call's clock (``Clock.asleep``); no lock is
held across an ``await`` (the state objects take theirs for microseconds, between awaits); a
cancelled try gives back what it took (its limit slot, its breaker probe, a retry's token).
"""

from .drive import AsyncNext, aresume
from .stages import async_chain

__all__ = ["AsyncNext", "aresume", "async_chain"]
