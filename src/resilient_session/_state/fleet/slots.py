"""A sync in a Redis Cluster: the hosts' script calls grouped by the master that holds each
host's slot, one pipeline per master, each call touching the keys of one slot only.

A host's keys share one hash tag (``keys.hash_tag``), so each call is one slot's and runs
where that slot lives. What a cluster answers while it changes is followed here, within the
sync: a ``MOVED`` or ``ASK`` (a slot resharded, a replica promoted) or ``TRYAGAIN`` (a slot
half migrated) sends that host's call again through redis-py's ``RedisCluster``, which
follows redirects and learns the new owner of the slot. A master out of reach fails the calls
of its hosts alone, and the slot map is read again, so that a failover's new master is found
by the next sync.
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
# Answers that name where to go, or to come back: sent again through the cluster client.
_REDIRECTS: Final = (AskError, TryAgainError)


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
        # A slot no master holds, in the map as read: read it again.
        lost = any(reply is not None for reply in replies)
        for node, indexes in groups.values():
            try:
                client = cluster.get_redis_connection(node)
                got = self._node(client, [calls[i] for i in indexes])
            except (redis.ConnectionError, redis.TimeoutError) as error:
                lost = True
                got = [error] * len(indexes)
            for index, reply in zip(indexes, got, strict=True):
                replies[index] = reply
        for index, reply in enumerate(replies):
            if isinstance(reply, _REDIRECTS):
                keys, args = calls[index]
                try:
                    replies[index] = cluster.eval(self._script, len(keys), *keys, *args)
                except redis.RedisError as error:
                    replies[index] = error
        if lost:
            self._refresh(cluster)
        return replies

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

    @staticmethod
    def _refresh(cluster: RedisCluster) -> None:
        # The slot map, read again from any node that answers (redis-py's own refresh, as
        # its pipelines do after a connection error): a failover's new master is found.
        # Nothing answering is a later sync's to find out.
        with contextlib.suppress(redis.RedisError):
            cluster.nodes_manager.initialize()

    def close(self) -> None:
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close()
