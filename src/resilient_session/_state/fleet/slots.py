"""A sync in a Redis Cluster: the hosts' script calls grouped by the master that holds each
host's slot, one pipeline per master, each call touching the keys of one slot only.

A host's keys share one hash tag (``keys.hash_tag``), so each call is one slot's and runs
where that slot lives, as redis-py's ``RedisCluster`` maps slots to masters. What a cluster
answers while it changes is followed within the sync, with one more pipeline per node named:
a ``MOVED`` (the slot has a new master: a reshard ended, a replica took over) sends the call
to that master, and the slot map is read again; an ``ASK`` (the slot is migrating and the
keys have gone) sends it after ``ASKING`` to the node importing them. A ``TRYAGAIN`` (a
migrating slot with the host's keys on both sides, or none made yet), a master out of reach
or a second redirect fails that host's sync alone, as a failed sync: its batch goes out again
with the next one. redis-py's own following of redirects is not used: it retries ``TRYAGAIN``
with sleeps, for up to 16 round trips per call.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Final

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)

from .link import Call

# What a reply may be when the call's slot could not be served: the host's batch goes out
# again with a later sync, as after a failed sync. MOVED is a kind of ASK for redis-py.
UNREACHED: Final = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    ClusterError,
    AskError,
    TryAgainError,
    RedisClusterException,
)


class ClusterLink:
    """The fleet's keys in a Redis Cluster.

    Args:
        build: makes redis-py's ``RedisCluster`` (``connect.cluster``). It reads the slot
            map from a node, so it is called by the first sync, on the sync thread, and again
            by each sync until it succeeds: a cluster down at startup delays no session.
        script: the sync script's text.
    """

    def __init__(self, build: Callable[[], RedisCluster], script: str) -> None:
        self._build = build
        self._script = script
        self._sha = hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()
        self._cluster: RedisCluster | None = None

    def run(self, calls: Sequence[Call]) -> list[Any]:
        cluster = self._cluster
        if cluster is None:
            cluster = self._cluster = self._build()
        replies: list[Any] = [None] * len(calls)
        groups: dict[str, tuple[ClusterNode, list[int]]] = {}
        for index, (keys, _) in enumerate(calls):
            try:
                node = cluster.get_node_from_key(keys[0])
            except RedisClusterException as uncovered:
                replies[index] = uncovered
                continue
            groups.setdefault(node.name, (node, []))[1].append(index)
        # A slot no master holds in the map as read: the map is read again.
        stale = any(reply is not None for reply in replies)
        stale |= self._send(cluster, groups, calls, replies, asking=False)
        # One more round trip for the hosts redirected, to the node each was sent to; what
        # that one answers stands until the next sync.
        moved: dict[str, tuple[ClusterNode, list[int]]] = {}
        asked: dict[str, tuple[ClusterNode, list[int]]] = {}
        for index, reply in enumerate(replies):
            if isinstance(reply, AskError):
                # A MOVED is a kind of ASK to redis-py: the slot has a new master for good.
                stale |= isinstance(reply, MovedError)
                to = moved if isinstance(reply, MovedError) else asked
                node = cluster.get_node(host=reply.host, port=reply.port)
                if node is None:
                    stale = True
                else:
                    to.setdefault(node.name, (node, []))[1].append(index)
        stale |= self._send(cluster, moved, calls, replies, asking=False)
        stale |= self._send(cluster, asked, calls, replies, asking=True)
        if stale:
            self._refresh(cluster)
        return replies

    def _send(
        self,
        cluster: RedisCluster,
        groups: dict[str, tuple[ClusterNode, list[int]]],
        calls: Sequence[Call],
        replies: list[Any],
        *,
        asking: bool,
    ) -> bool:
        """One pipeline per node of *groups*, its replies put in *replies*; True when a node
        was out of reach (its hosts' replies are the error)."""
        lost = False
        for node, indexes in groups.values():
            chosen = [calls[i] for i in indexes]
            try:
                client = cluster.get_redis_connection(node)
                got = self._asking(client, chosen) if asking else self._node(client, chosen)
            except (redis.ConnectionError, redis.TimeoutError) as error:
                lost = True
                got = [error] * len(indexes)
            for index, reply in zip(indexes, got, strict=True):
                replies[index] = reply
        return lost

    def _node(self, client: redis.Redis, calls: list[Call]) -> list[Any]:
        """One pipeline on one master; a master that lost the script (a replica promoted, a
        restart) loads it and runs those calls again."""
        replies = self._pipeline(client, calls)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            client.script_load(self._script)
            again = self._pipeline(client, [calls[i] for i in missing])
            for index, reply in zip(missing, again, strict=True):
                replies[index] = reply
        return replies

    def _pipeline(self, client: redis.Redis, calls: list[Call]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        try:
            for keys, args in calls:
                pipe.evalsha(self._sha, len(keys), *keys, *args)
            replies: list[Any] = pipe.execute(raise_on_error=False)
            return replies
        finally:
            pipe.reset()

    def _asking(self, client: redis.Redis, calls: list[Call]) -> list[Any]:
        """Each call after ``ASKING``, on the node importing its slot: the script's text, as
        that node may not have it yet. A host whose keys are not all there yet (some still on
        the old master, or none made yet) gets ``TRYAGAIN``: a multi-key script waits for the
        migration to end."""
        pipe = client.pipeline(transaction=False)
        try:
            for keys, args in calls:
                pipe.execute_command("ASKING")
                pipe.eval(self._script, len(keys), *keys, *args)
            replies: list[Any] = pipe.execute(raise_on_error=False)
            return replies[1::2]
        finally:
            pipe.reset()

    @staticmethod
    def _refresh(cluster: RedisCluster) -> None:
        # The slot map, read again from any node that answers (redis-py's own refresh, as
        # its pipelines do after a connection error): a failover's new master is found.
        # Nothing answering is a later sync's to find out (redis-py says so with a
        # RedisClusterException, which is no RedisError).
        with contextlib.suppress(redis.RedisError, RedisClusterException):
            cluster.nodes_manager.initialize()

    def pubsub(self) -> Any:
        """A ``PubSub`` on one node of the cluster: a PUBLISH reaches the subscribers of every
        node. Before the first sync has built the cluster client, the listener builds one of
        its own: two threads never build into one field."""
        cluster = self._cluster
        if cluster is None:
            cluster = self._build()
        return cluster.pubsub()

    def close(self) -> None:
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close()
