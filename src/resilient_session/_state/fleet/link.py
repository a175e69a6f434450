"""How a sync reaches the fleet's Redis: one call of the sync script per host, the replies in
the hosts' order. ``ServerLink`` talks to one server (``mode: single``, or the master the
sentinels name); ``slots.ClusterLink`` to a Redis Cluster. No decision about what a reply
means is made here: the backend makes them."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

import redis
from redis.exceptions import NoScriptError

from .keys import HostKeys

# One host's call: its keys and the script's arguments (``exchange.Batch.args``).
Call: TypeAlias = tuple[HostKeys, Sequence[str | int | float]]


class Link(Protocol):
    """What the redis backend needs of a connection to the fleet's Redis."""

    def run(self, calls: Sequence[Call]) -> list[Any]:
        """The script's reply to each call, or the error (an ``Exception``) it got back.

        Raises:
            Exception: the sync reached no host (the server is down, slow, unknown).
        """

    def pubsub(self) -> Any:
        """A new redis-py ``PubSub``, not yet subscribed, for the listener thread (``push``)."""

    def close(self) -> None:
        """Drop the connections; never raises."""


class ServerLink:
    """One Redis server: every call in one pipeline, one round trip.

    Args:
        client: redis-py's client for the server.
        script: the sync script's text.
        others: clients closed with it (the sentinels that name the server).
    """

    def __init__(
        self, client: redis.Redis, script: str, others: Sequence[redis.Redis] = ()
    ) -> None:
        self.client = client
        self._script = client.register_script(script)
        self._others = tuple(others)

    def run(self, calls: Sequence[Call]) -> list[Any]:
        """One EVALSHA per host in one pipeline, one round trip. A server that lost the script
        (restarted, SCRIPT FLUSH) answers NOSCRIPT to all of them, and ran none: the script
        is loaded through its ``Script`` object and those hosts' calls are sent again."""
        replies = self._pipeline(calls)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            self._script.sha = self.client.script_load(self._script.script)
            again = self._pipeline([calls[i] for i in missing])
            for index, reply in zip(missing, again, strict=True):
                replies[index] = reply
        return replies

    def _pipeline(self, calls: Sequence[Call]) -> list[Any]:
        # Not the Script object's own pipeline support: it asks SCRIPT EXISTS first, a second
        # round trip on every sync.
        pipe = self.client.pipeline(transaction=False)
        try:
            for keys, args in calls:
                pipe.evalsha(self._script.sha, len(keys), *keys, *args)
            replies: list[Any] = pipe.execute(raise_on_error=False)
            return replies
        finally:
            pipe.reset()

    def pubsub(self) -> Any:
        return self.client.pubsub()

    def close(self) -> None:
        # On the caller's thread: a redis-py error here (a pool deadlocked by a fork) must
        # not reach the caller either.
        for client in (self.client, *self._others):
            with contextlib.suppress(Exception):
                client.close()
