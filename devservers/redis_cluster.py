"""A throwaway Redis Cluster on free loopback ports: masters and their replicas, each a
``redis-server --cluster-enabled yes``, joined by ``redis-cli --cluster create``; masters can
be killed (a replica takes over) and slots moved between masters, and every node is stopped
at the end.

Example::

    with RedisClusterNodes(masters=3, replicas=1) as cluster:
        state = {"backend": "redis", "mode": "cluster", "url": cluster.url}
        old = cluster.master_of("some-key")
        cluster.kill(old)
        new = cluster.wait_failover(old)
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Final

from ._resp import ReplyError
from .redis_server import RedisServer, StartedInWith, free_port, program, wait_until

SLOTS: Final = 16_384
_CREATE_WAIT: Final = 60.0
_MIGRATE_BATCH: Final = 100


class ClusterNode(RedisServer):
    """One node: a cluster bus on a free port of its own (``--cluster-port``), and a replica
    that fails over whatever its replication lag (``--cluster-replica-validity-factor 0``).

    Its ``nodes.conf`` stays in its directory, so a node restarted rejoins as itself.
    """

    def __init__(self, node_timeout_ms: int, niceness: int | None = None) -> None:
        self.bus_port = free_port()
        super().__init__(
            niceness=niceness,
            options=(
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(node_timeout_ms),
                "--cluster-port", str(self.bus_port),
                "--cluster-replica-validity-factor", "0",
                # A replica is in sync within a moment, not after the 5 s default wait.
                "--repl-diskless-sync-delay", "0",
            )
        )  # fmt: skip

    @property
    def node_id(self) -> str:
        return str(self.command("CLUSTER", "MYID"))


@dataclass(frozen=True, slots=True)
class NodeLine:
    """One line of ``CLUSTER NODES``: a node as another node sees it."""

    node_id: str
    port: int
    flags: frozenset[str]
    slots: tuple[tuple[int, int], ...]

    @property
    def serving_master(self) -> bool:
        return "master" in self.flags and not self.flags & {"fail", "fail?", "handshake"}

    def holds(self, slot: int) -> bool:
        return any(first <= slot <= last for first, last in self.slots)


def _parse(text: str) -> list[NodeLine]:
    lines = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        address = fields[1].split("@")[0]
        ranges = []
        for part in fields[8:]:
            if part.startswith("["):
                continue  # a slot being migrated or imported: still its owner's
            first, _, last = part.partition("-")
            ranges.append((int(first), int(last or first)))
        port = int(address.rpartition(":")[2])
        lines.append(NodeLine(fields[0], port, frozenset(fields[2].split(",")), tuple(ranges)))
    return lines


class RedisClusterNodes(StartedInWith):
    """``masters`` masters with ``replicas`` replicas each, every one on 127.0.0.1.

    Args:
        masters: 3 at least: a failover needs a majority of masters to agree.
        replicas: per master; 1 lets a killed master's slots be taken over.
        node_timeout_ms: ``cluster-node-timeout``: a master silent this long is failed.
        niceness: each node's CPU priority, as ``RedisServer``'s (a benchmark's nodes on a
            shared machine; a negative one needs root).

    Raises:
        RedisPartMissing: ``redis-server`` or ``redis-cli`` is not on PATH.
    """

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
        niceness: int | None = None,
    ) -> None:
        self._cli = program("redis-cli")
        self.masters = masters
        self.replicas = replicas
        count = masters * (1 + replicas)
        self.nodes = [ClusterNode(node_timeout_ms, niceness) for _ in range(count)]

    @property
    def url(self) -> str:
        """The url of a node that runs: any node's leads a client to the whole cluster."""
        return self.alive()[0].url

    def start(self, timeout: float = 60.0) -> None:
        """Start every node, make them one cluster, and wait until it serves every slot and
        each replica has synced."""
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            replicas = ("--cluster-replicas", str(self.replicas), "--cluster-yes")
            subprocess.run(  # noqa: S603 - a fixed argument list, no shell
                [self._cli, "--cluster", "create", *addresses, *replicas],
                check=True,
                capture_output=True,
                timeout=_CREATE_WAIT,
            )
            wait_until(self.ready, timeout, "the cluster was not ready")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop every node and remove its directory."""
        for node in self.nodes:
            node.close()

    def alive(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.running]

    def table(self, node: ClusterNode | None = None) -> list[NodeLine]:
        """``CLUSTER NODES`` as *node* (a live one by default) sees the cluster."""
        asked = node if node is not None else self.alive()[0]
        return _parse(str(asked.command("CLUSTER", "NODES")))

    def by_port(self, port: int) -> ClusterNode:
        return next(node for node in self.nodes if node.port == port)

    def slot_of(self, key: str) -> int:
        return int(self.alive()[0].command("CLUSTER", "KEYSLOT", key))

    def master_of(self, key: str) -> ClusterNode:
        """The master that holds *key*'s slot now, as a live node sees it."""
        slot = self.slot_of(key)
        line = next(line for line in self.table() if line.serving_master and line.holds(slot))
        return self.by_port(line.port)

    def ready(self) -> bool:
        """Every live node says ``cluster_state:ok`` and sees live masters holding every slot,
        and every live replica is in sync with its master."""
        try:
            for node in self.alive():
                if "cluster_state:ok" not in str(node.command("CLUSTER", "INFO")):
                    return False
                alive = {other.port for other in self.alive()}
                held = sum(
                    last - first + 1
                    for line in self.table(node)
                    if line.serving_master and line.port in alive
                    for first, last in line.slots
                )
                role = node.command("ROLE")
                if held != SLOTS or (role[0] == "slave" and role[3] != "connected"):
                    return False
        except (OSError, ReplyError):
            return False
        return True

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL one node."""
        node.kill()

    def wait_failover(self, old: ClusterNode, timeout: float = 30.0) -> ClusterNode:
        """The replica that took over *old*'s slots, once every live node agrees."""
        slots = next(line for line in self.table() if line.port == old.port).slots
        wait_until(self.ready, timeout, f"no replica took over from port {old.port}")
        slot = slots[0][0]
        line = next(line for line in self.table() if line.serving_master and line.holds(slot))
        return self.by_port(line.port)

    def begin_migration(self, slot: int, target: ClusterNode) -> None:
        """Move *slot*'s keys to *target*, leaving the slot migrating: its old master answers
        ``ASK`` for the keys it no longer has, *target* serves them to an ``ASKING`` client."""
        source = self._owner(slot)
        target.command("CLUSTER", "SETSLOT", str(slot), "IMPORTING", source.node_id)
        source.command("CLUSTER", "SETSLOT", str(slot), "MIGRATING", target.node_id)
        for _ in range(1_000):
            keys = source.command("CLUSTER", "GETKEYSINSLOT", str(slot), str(_MIGRATE_BATCH))
            if not keys:
                return
            source.command("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", *keys)
        raise RuntimeError(f"slot {slot} kept getting keys")

    def end_migration(self, slot: int, target: ClusterNode) -> None:
        """*slot* is *target*'s, told to every master: the old one answers ``MOVED``."""
        for node in self.alive():
            if node.command("ROLE")[0] == "master":
                node.command("CLUSTER", "SETSLOT", str(slot), "NODE", target.node_id)

    def _owner(self, slot: int) -> ClusterNode:
        line = next(line for line in self.table() if line.serving_master and line.holds(slot))
        return self.by_port(line.port)
