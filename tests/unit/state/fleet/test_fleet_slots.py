"""The sync in a Redis Cluster, against a scripted cluster: one pipeline per master, MOVED and
ASK followed once within the sync, a master out of reach failing its own hosts alone."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.exceptions import AskError, MovedError, NoScriptError, TryAgainError

from resilient_session._state.fleet.keys import host_keys
from resilient_session._state.fleet.link import Call
from resilient_session._state.fleet.slots import UNREACHED, ClusterLink

SCRIPT = "return 1"


class Node:
    """A master: its name, and what it answers to each host's call (by the host's first key),
    one answer per call, in order; ``down`` refuses the connection."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.name = f"127.0.0.1:{port}"
        self.answers: dict[str, list[Any]] = {}
        self.down = False
        self.pipelines: list[list[tuple[Any, ...]]] = []
        self.loaded = 0

    def pipeline(self, transaction: bool = True) -> Pipe:
        assert transaction is False
        return Pipe(self)

    def script_load(self, script: str) -> str:
        self.loaded += 1
        return "sha"


class Pipe:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.sent: list[tuple[Any, ...]] = []

    def evalsha(self, sha: str, count: int, *rest: Any) -> None:
        self.sent.append(("EVALSHA", *rest[:count]))

    def eval(self, script: str, count: int, *rest: Any) -> None:
        assert script == SCRIPT
        self.sent.append(("EVAL", *rest[:count]))

    def execute_command(self, *args: Any) -> None:
        self.sent.append(args)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        assert raise_on_error is False
        self.node.pipelines.append(self.sent)
        if self.node.down:
            raise redis.ConnectionError("Connection refused")
        replies: list[Any] = []
        for command in self.sent:
            if command == ("ASKING",):
                replies.append(b"OK")
            else:
                answers = self.node.answers.get(command[1], [])
                replies.append(answers.pop(0) if answers else ["ok", self.node.port])
        return replies

    def reset(self) -> None:
        pass


class Cluster:
    """What ClusterLink asks of redis-py's RedisCluster: the slot map, as a host -> node map."""

    def __init__(self, *nodes: Node) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.owner: dict[str, Node] = {}
        self.refreshed = 0
        self.nodes_manager = self

    def get_node_from_key(self, key: str) -> Node:
        return self.owner[key]

    def get_node(self, host: str, port: int) -> Node | None:
        return self.nodes.get(f"{host}:{port}")

    def get_redis_connection(self, node: Node) -> Node:
        return node

    def initialize(self) -> None:
        self.refreshed += 1

    def close(self) -> None:
        pass


@pytest.fixture
def cluster() -> Cluster:
    return Cluster(Node(7001), Node(7002))


def _calls(cluster: Cluster, **owners: int) -> list[Call]:
    """One call per host name given, its keys on the node of that port."""
    calls: list[Call] = []
    for host, port in owners.items():
        keys = host_keys("p:", host, tagged=True)
        cluster.owner[keys[0]] = cluster.nodes[f"127.0.0.1:{port}"]
        calls.append((keys, ("worker", 1)))
    return calls


def _link(cluster: Cluster) -> ClusterLink:
    return ClusterLink(lambda: cluster, SCRIPT)  # type: ignore[arg-type, return-value]


def _node(cluster: Cluster, port: int) -> Node:
    return cluster.nodes[f"127.0.0.1:{port}"]


def test_one_pipeline_per_master_each_call_one_hosts_keys(cluster):
    calls = _calls(cluster, a=7001, b=7002, c=7001, d=7001, e=7002)
    replies = _link(cluster).run(calls)
    assert replies == [["ok", 7001], ["ok", 7002], ["ok", 7001], ["ok", 7001], ["ok", 7002]]
    first, second = _node(cluster, 7001), _node(cluster, 7002)
    assert [len(sent) for sent in first.pipelines] == [3]
    assert [len(sent) for sent in second.pipelines] == [2]
    assert all(command[0] == "EVALSHA" and len(command) == 5 for command in first.pipelines[0])
    assert cluster.refreshed == 0


def test_moved_is_sent_to_the_new_master_and_the_map_read_again(cluster):
    calls = _calls(cluster, a=7001, b=7001)
    moved_key = calls[1][0][0]
    _node(cluster, 7001).answers[moved_key] = [MovedError("99 127.0.0.1:7002")]
    replies = _link(cluster).run(calls)
    assert replies == [["ok", 7001], ["ok", 7002]]
    assert _node(cluster, 7002).pipelines == [[("EVALSHA", *calls[1][0])]]
    assert cluster.refreshed == 1


def test_ask_is_sent_after_asking_with_the_scripts_text(cluster):
    calls = _calls(cluster, a=7001)
    _node(cluster, 7001).answers[calls[0][0][0]] = [AskError("99 127.0.0.1:7002")]
    replies = _link(cluster).run(calls)
    assert replies == [["ok", 7002]]
    assert _node(cluster, 7002).pipelines == [[("ASKING",), ("EVAL", *calls[0][0])]]
    # An ASK is for one query: the slot map stands.
    assert cluster.refreshed == 0


def test_a_second_redirect_or_tryagain_stands_until_the_next_sync(cluster):
    calls = _calls(cluster, a=7001, b=7001)
    first, second = _node(cluster, 7001), _node(cluster, 7002)
    first.answers[calls[0][0][0]] = [AskError("99 127.0.0.1:7002")]
    second.answers[calls[0][0][0]] = [TryAgainError("Multiple keys request during rehashing")]
    first.answers[calls[1][0][0]] = [TryAgainError("Multiple keys request during rehashing")]
    replies = _link(cluster).run(calls)
    assert all(isinstance(reply, TryAgainError) for reply in replies)
    assert all(isinstance(reply, UNREACHED) for reply in replies)
    assert len(second.pipelines) == 1


def test_a_master_out_of_reach_fails_its_own_hosts_alone(cluster):
    calls = _calls(cluster, a=7001, b=7002, c=7002)
    _node(cluster, 7002).down = True
    replies = _link(cluster).run(calls)
    assert replies[0] == ["ok", 7001]
    assert all(isinstance(reply, redis.ConnectionError) for reply in replies[1:])
    assert cluster.refreshed == 1


def test_a_master_without_the_script_loads_it_and_runs_those_calls_again(cluster):
    calls = _calls(cluster, a=7001, b=7001)
    node = _node(cluster, 7001)
    node.answers[calls[1][0][0]] = [NoScriptError("No matching script")]
    replies = _link(cluster).run(calls)
    assert replies == [["ok", 7001], ["ok", 7001]]
    assert node.loaded == 1
    assert [len(sent) for sent in node.pipelines] == [2, 1]


def test_a_cluster_out_of_reach_at_first_is_asked_again_at_each_sync():
    """The client reads the slot map when made: made by the first sync, and by each one
    after until one succeeds, never when the session is built."""
    made: list[Cluster] = []

    def build() -> Cluster:
        if len(made) < 1:
            made.append(Cluster())
            raise redis.ConnectionError("Connection refused")
        made.append(Cluster(Node(7001)))
        return made[-1]

    link = ClusterLink(build, SCRIPT)  # type: ignore[arg-type]
    assert made == []
    with pytest.raises(redis.ConnectionError):
        link.run([])
    assert link.run([]) == []
    assert len(made) == 2
