"""The ``state:`` keys of each Redis mode and TLS: each bad one named, and the client each
mode builds, without a connection made."""

from __future__ import annotations

import random
import ssl
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.sentinel import SentinelConnectionPool

from resilient_session._state.fleet.connect import open_link
from resilient_session._state.fleet.link import ServerLink
from resilient_session._state.fleet.lua import SYNC
from resilient_session._state.fleet.redis_backend import RedisBackend
from resilient_session._state.fleet.slots import ClusterLink
from resilient_session.config import StatePolicy, load
from resilient_session.errors import ConfigError
from resilient_session.testing import FakeClock

SENTINEL_PASSWORD = "s-pw"  # noqa: S105 - a test's, never sent
SENTINEL = {"mode": "sentinel", "sentinels": [["127.0.0.1", 26379]], "service_name": "fleet"}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"mode": "sharded"}, "state.mode: invalid enum value 'sharded'"),
        ({"mode": "sentinel"}, "state.sentinels: mode sentinel needs at least one [host, port]"),
        (
            {"mode": "sentinel", "sentinels": [["h", 26379]]},
            "state.service_name: mode sentinel needs the name the sentinels know the master by",
        ),
        ({**SENTINEL, "sentinels": [["h", "x"]]}, "state.sentinels[0][1]: expected int"),
        ({**SENTINEL, "sentinels": [["h", 0]]}, "state.sentinels[0][1]: expected int >= 1"),
        ({**SENTINEL, "sentinels": [["a b", 1]]}, "state.sentinels[0][0]: expected str matching"),
        ({**SENTINEL, "sentinels": [["h"]]}, "state.sentinels[0]: expected array of length 2"),
        ({**SENTINEL, "url": "unix:///r.sock"}, "state.url: mode sentinel needs a redis://"),
        ({"sentinels": [["h", 1]]}, "state.sentinels: read only with mode: sentinel"),
        ({"mode": "cluster", "service_name": "m"}, "state.service_name: read only with mode: s"),
        ({"sentinel_password": "pw"}, "state.sentinel_password: read only with mode: sentinel"),
        ({"mode": "cluster", "url": "unix:///r.sock"}, "state.url: mode cluster needs a redis://"),
        ({"mode": "cluster", "url": "redis://h:1/2"}, "state.url: a Redis Cluster has database 0"),
        ({"mode": "cluster", "url": "redis://h:1?db=1"}, "state.url: a Redis Cluster has data"),
        ({"mode": "cluster", "key_prefix": "{app}:"}, "state.key_prefix: may not hold { or }"),
        ({"ssl_ca_certs": "/ca.pem"}, "state.ssl_ca_certs: TLS needs a rediss:// url, got a red"),
        ({"ssl_cert_reqs": "none"}, "state.ssl_cert_reqs: TLS needs a rediss:// url"),
        ({"ssl_check_hostname": False}, "state.ssl_check_hostname: TLS needs a rediss:// url"),
        (
            {"url": "rediss://h:1/0", "ssl_keyfile": "/k.pem"},
            "state.ssl_keyfile: needs ssl_certfile, the client certificate it belongs to",
        ),
        ({"url": "rediss://h:1/0", "ssl_cert_reqs": "maybe"}, "state.ssl_cert_reqs: invalid enum"),
    ],
)
def test_bad_mode_and_tls_keys_are_named(state, message):
    with pytest.raises(ConfigError) as raised:
        load({"state": state})
    assert str(raised.value).startswith(message)


def test_a_cluster_url_with_a_password_is_checked_without_showing_it():
    """A password holding '/' does not read as a database, and no message quotes it."""
    assert load({"state": {"mode": "cluster", "url": "redis://:pa/ss@h:1/0"}}).state
    with pytest.raises(ConfigError) as raised:
        load({"state": {"mode": "cluster", "url": "redis://:pa/ss@h:1/3"}})
    assert "pa/ss" not in str(raised.value)


def _policy(**state: Any) -> StatePolicy:
    return load({"state": {"backend": "redis", "timeout_ms": 25, **state}}).state


def test_single_mode_is_one_client_with_one_try_within_timeout():
    link = open_link(_policy(url="redis://127.0.0.1:1/3"), SYNC)
    assert isinstance(link, ServerLink)
    pool = link.client.connection_pool
    assert pool.connection_kwargs["socket_timeout"] == 0.025
    assert pool.connection_kwargs["db"] == 3
    retry = link.client.get_retry()
    assert retry is not None
    tries: list[int] = []

    def refused() -> None:
        tries.append(1)
        raise redis.ConnectionError("refused")

    with pytest.raises(redis.ConnectionError):
        retry.call_with_retry(refused, lambda error: None)
    assert tries == [1]
    link.close()


def test_cluster_mode_connects_to_no_node_when_built():
    """A cluster client reads the slot map when made: the first sync makes it, so a session
    built while the cluster is down is built all the same."""
    link = open_link(_policy(mode="cluster", url="redis://127.0.0.1:1/0"), SYNC)
    assert isinstance(link, ClusterLink)
    assert link._cluster is None
    link.close()


def test_sentinel_mode_asks_the_sentinels_for_the_master_on_connecting():
    """The master's client is built on the sentinels, connects to none of them yet, and
    takes the master's password and database from the url, not its host."""
    policy = _policy(
        **SENTINEL, url="redis://:master-pw@ignored:9/2", sentinel_password=SENTINEL_PASSWORD
    )
    link = open_link(policy, SYNC)
    assert isinstance(link, ServerLink)
    pool = link.client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "fleet"
    kwargs = pool.connection_kwargs
    assert (kwargs["password"], kwargs["db"], kwargs["socket_timeout"]) == ("master-pw", 2, 0.025)
    assert "host" not in kwargs
    (sentinel,) = pool.sentinel_manager.sentinels
    sentinel_kwargs = sentinel.connection_pool.connection_kwargs
    assert (sentinel_kwargs["password"], sentinel_kwargs["port"]) == (SENTINEL_PASSWORD, 26379)
    assert sentinel_kwargs["socket_connect_timeout"] == 0.025
    link.close()


def _pem(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_text("not read until a connection is made\n")
    return str(path)


def test_tls_options_reach_the_connection(tmp_path):
    ca, cert, key = (_pem(tmp_path, name) for name in ("ca.pem", "cert.pem", "key.pem"))
    policy = _policy(
        url="rediss://127.0.0.1:1/0", ssl_ca_certs=ca, ssl_certfile=cert, ssl_keyfile=key
    )
    link = open_link(policy, SYNC)
    assert isinstance(link, ServerLink)
    connection = link.client.connection_pool.make_connection()
    assert isinstance(connection, redis.SSLConnection)
    assert (connection.ca_certs, connection.certfile, connection.keyfile) == (ca, cert, key)
    assert connection.cert_reqs == ssl.CERT_REQUIRED
    assert connection.check_hostname is True
    link.close()


def test_no_certificate_check_means_no_hostname_check(tmp_path):
    link = open_link(_policy(url="rediss://127.0.0.1:1/0", ssl_cert_reqs="none"), SYNC)
    assert isinstance(link, ServerLink)
    connection = link.client.connection_pool.make_connection()
    assert isinstance(connection, redis.SSLConnection)
    assert (connection.cert_reqs, connection.check_hostname) == (ssl.CERT_NONE, False)
    link.close()


@pytest.mark.parametrize("name", ["ssl_ca_certs", "ssl_certfile", "ssl_keyfile"])
def test_a_tls_file_that_cannot_be_read_names_its_key(tmp_path, name):
    state: dict[str, Any] = {"url": "rediss://127.0.0.1:1/0", "ssl_certfile": _pem(tmp_path, "c")}
    state[name] = str(tmp_path / "missing.pem")
    with pytest.raises(ConfigError) as raised:
        RedisBackend(_policy(**state), FakeClock(), random.Random(0))
    assert str(raised.value) == f"state.{name}: no readable file at {state[name]!r}"
