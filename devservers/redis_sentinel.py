"""A throwaway Sentinel set on free loopback ports: a master, its replica, and sentinels
(``redis-server --sentinel``) watching them under one service name; the master can be killed
and the sentinels fail over to the replica. Every process is stopped at the end.

Example::

    with RedisSentinels(sentinels=3, quorum=2) as fleet:
        state = {"backend": "redis", "mode": "sentinel", "sentinels": fleet.addresses,
                 "service_name": fleet.service_name}
        fleet.kill_master()
        fleet.wait_failover()
"""

from __future__ import annotations

import os
from typing import Final

from ._resp import ReplyError
from .redis_server import RedisServer, StartedInWith, wait_until

_SYNCED: Final = ("--repl-diskless-sync-delay", "0")


class SentinelServer(RedisServer):
    """``redis-server sentinel.conf --sentinel``, its configuration in its own directory (a
    sentinel rewrites it as it learns)."""

    def __init__(self, config: list[str], password: str | None) -> None:
        super().__init__()
        self.password = password
        self._config = os.path.join(self.directory, "sentinel.conf")
        lines = [f"port {self.port}", "bind 127.0.0.1", f"dir {self.directory}", *config]
        if password is not None:
            # Asked of clients, and of the other sentinels by this one.
            lines += [f"requirepass {password}", f"sentinel sentinel-pass {password}"]
        with open(self._config, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")

    def arguments(self) -> list[str]:
        return [self._executable, self._config, "--sentinel"]

    def ping(self, timeout: float = 0.5) -> bool:
        try:
            return bool(self.command("PING", timeout=timeout) == "PONG")
        except (OSError, ReplyError):
            return False


class RedisSentinels(StartedInWith):
    """A master, one replica, and ``sentinels`` sentinels that agree on a failover when
    ``quorum`` of them find the master down for ``down_after_ms``.

    Args:
        password: asked by the sentinels of their clients (``sentinel_password``).

    Raises:
        RedisPartMissing: ``redis-server`` is not on PATH.
    """

    def __init__(
        self,
        sentinels: int = 3,
        quorum: int = 2,
        down_after_ms: int = 500,
        failover_timeout_ms: int = 3000,
        service_name: str = "fleet",
        password: str | None = None,
    ) -> None:
        self.service_name = service_name
        self.master = RedisServer(options=_SYNCED)
        self.replica = RedisServer(
            options=(*_SYNCED, "--replicaof", "127.0.0.1", str(self.master.port))
        )
        watch = [
            f"sentinel monitor {service_name} 127.0.0.1 {self.master.port} {quorum}",
            f"sentinel down-after-milliseconds {service_name} {down_after_ms}",
            f"sentinel failover-timeout {service_name} {failover_timeout_ms}",
        ]
        self.sentinels = [SentinelServer(watch, password) for _ in range(sentinels)]

    @property
    def addresses(self) -> list[list[str | int]]:
        """``[[host, port], ...]`` of the sentinels, as ``state.sentinels`` takes them."""
        return [["127.0.0.1", sentinel.port] for sentinel in self.sentinels]

    def start(self, timeout: float = 30.0) -> None:
        """Start the master and replica, wait for the replica to sync, start the sentinels and
        wait until each knows the replica and every other sentinel."""
        try:
            self.master.start()
            self.replica.start()
            wait_until(self._synced, timeout, "the replica did not sync")
            for sentinel in self.sentinels:
                sentinel.start()
            wait_until(self._watching, timeout, "the sentinels did not agree")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for server in (*self.sentinels, self.replica, self.master):
            server.close()

    def master_port(self, sentinel: SentinelServer | None = None) -> int:
        """The master's port as *sentinel* (the first by default) names it."""
        asked = sentinel if sentinel is not None else self.sentinels[0]
        reply = asked.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name)
        return int(reply[1])

    def kill_master(self) -> RedisServer:
        """SIGKILL the server the sentinels name as master now; returns it."""
        port = self.master_port()
        killed = self.master if self.master.port == port else self.replica
        killed.kill()
        return killed

    def wait_failover(self, timeout: float = 30.0) -> RedisServer:
        """The server every sentinel names as master once one that runs says it is one."""

        def over() -> bool:
            try:
                ports = {self.master_port(sentinel) for sentinel in self.sentinels}
                if len(ports) != 1:
                    return False
                server = self._server(ports.pop())
                return server.running and server.command("ROLE")[0] == "master"
            except (OSError, ReplyError):
                return False

        wait_until(over, timeout, "the sentinels did not fail over")
        return self._server(self.master_port())

    def _server(self, port: int) -> RedisServer:
        return self.master if self.master.port == port else self.replica

    def _synced(self) -> bool:
        try:
            role = self.replica.command("ROLE")
        except (OSError, ReplyError):
            return False
        return bool(role[0] == "slave" and role[3] == "connected")

    def _watching(self) -> bool:
        others = str(len(self.sentinels) - 1)
        for sentinel in self.sentinels:
            try:
                reply = sentinel.command("SENTINEL", "MASTER", self.service_name)
            except (OSError, ReplyError):
                return False
            state = dict(zip(reply[::2], reply[1::2], strict=True))
            if state.get("num-slaves") != "1" or state.get("num-other-sentinels") != others:
                return False
        return True
