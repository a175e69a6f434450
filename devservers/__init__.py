"""Servers the project's own tests and benchmarks start on loopback: a throwaway
``redis-server``, a Redis Cluster of three masters, a Sentinel set and a TLS-only server, each
asked how it is over a one-command client of its own (``_resp``: no redis-py, an extra).

Shipped in the source distribution beside ``tests/``, never in the wheel: users' tests get what
``resilient_session.testing`` offers (a fake clock, a scripted transport, ``FlakyUpstream``)."""

from __future__ import annotations

from .redis_cluster import ClusterNode, RedisClusterNodes
from .redis_sentinel import RedisSentinels
from .redis_server import RedisPartMissing, RedisServer, RedisServerMissing
from .redis_tls import TlsRedisServer

__all__ = [
    "ClusterNode",
    "RedisClusterNodes",
    "RedisPartMissing",
    "RedisSentinels",
    "RedisServer",
    "RedisServerMissing",
    "TlsRedisServer",
]
