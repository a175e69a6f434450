"""redis-py's client for each ``state.mode``: ``Redis`` for one server, ``RedisCluster`` for a
Redis Cluster, ``Sentinel.master_for`` for the master the sentinels name; TLS with a
``rediss://`` url and the ``ssl_*`` keys. Every client gives a command one try within
``timeout_ms``: redis-py's default retries with backoff alone would outlast it.

Nothing here connects: a Redis down when a session is built costs that session nothing.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import SSLConnection, parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel

from resilient_session._observe.redact import redact_store_message
from resilient_session.config.policy import StatePolicy
from resilient_session.errors import ConfigError

from .link import Link, ServerLink
from .slots import ClusterLink

_TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def open_link(policy: StatePolicy, script: str) -> Link:
    """The link *policy*'s mode names, running *script*.

    Raises:
        ConfigError: ``state.url`` is not a URL redis-py can connect with, or a TLS file
            named cannot be read; the message names the key.
    """
    tls = _tls(policy)
    try:
        if policy.mode == "cluster":
            # Read here, so a bad url fails the session's construction, not each sync.
            parse_url(policy.url)
            return ClusterLink(functools.partial(_cluster, policy, tls), script)
        if policy.mode == "sentinel":
            master, sentinels = _sentinel_master(policy, tls)
            return ServerLink(master, script, sentinels)
        client = redis.Redis.from_url(policy.url, retry=_no_retry(), **_options(policy), **tls)
        return ServerLink(client, script)
    except ValueError as exc:
        raise ConfigError(f"state.url: {redact_store_message(str(exc), policy.url)}") from None


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


def _options(policy: StatePolicy) -> dict[str, Any]:
    timeout = policy.timeout_ms / 1000
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry_on_timeout": False,
        "health_check_interval": 0,
    }


def _tls(policy: StatePolicy) -> dict[str, Any]:
    """redis-py's TLS options, with a ``rediss://`` url (the config's rules refuse ``ssl_*``
    keys without one); a file that cannot be read is a ConfigError naming its key."""
    if not policy.url.startswith("rediss://"):
        return {}
    for name in _TLS_FILES:
        path = getattr(policy, name)
        if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise ConfigError(f"state.{name}: no readable file at {path!r}")
    return {
        "ssl_ca_certs": policy.ssl_ca_certs,
        "ssl_certfile": policy.ssl_certfile,
        "ssl_keyfile": policy.ssl_keyfile,
        "ssl_cert_reqs": policy.ssl_cert_reqs,
        # Python refuses a hostname check without a certificate to check it against.
        "ssl_check_hostname": policy.ssl_check_hostname and policy.ssl_cert_reqs != "none",
    }


def _cluster(policy: StatePolicy, tls: dict[str, Any]) -> RedisCluster:
    """The cluster client, from the url of any node; it reads the slot map at once."""
    return RedisCluster.from_url(
        policy.url,
        # The cluster client's own retries: none. The sync after a failed one is the retry.
        retry=_no_retry(),
        # The slots a live master holds are served while another master is down.
        require_full_coverage=False,
        **_options(policy),
        **tls,
    )


def _sentinel_master(
    policy: StatePolicy, tls: dict[str, Any]
) -> tuple[redis.Redis, list[redis.Redis]]:
    """The master the sentinels know as ``service_name``, found again on each new connection
    (after a failover the next sync connects to the new master), and a client per sentinel.
    The url gives the master's password, database and TLS; its host and port are not read."""
    given = parse_url(policy.url)
    for place in ("host", "port", "path"):
        given.pop(place, None)
    # redis-py's sentinel pool picks its own TLS connection class when told ssl=True.
    secure = given.pop("connection_class", None) is SSLConnection
    tls = {"ssl": True, **tls} if secure else {}
    timeout = policy.timeout_ms / 1000
    sentinels = Sentinel(
        policy.sentinels,
        # Each sentinel is a Redis client of its own, built from these alone.
        sentinel_kwargs={
            "password": policy.sentinel_password,
            "retry": _no_retry(),
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "health_check_interval": 0,
            **tls,
        },
    )
    # The url's own options win, as they do for Redis.from_url.
    options = {**_options(policy), **given, **tls}
    service_name = policy.service_name
    if service_name is None:  # config/store.py refuses mode sentinel without it
        raise ValueError("state.service_name: mode sentinel needs the master's name")
    master: redis.Redis = sentinels.master_for(service_name, retry=_no_retry(), **options)
    return master, list(sentinels.sentinels)
