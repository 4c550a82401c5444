"""Client pieces of master/slave reads, without sockets: where a pull goes, suggestions, offsets
kept while the master is away."""

from __future__ import annotations

from typing import Any

from pymq.client.offset_store import RemoteOffsetStore
from pymq.client.pull_api import PullNodes, pull
from pymq.client.routes import RouteCache
from pymq.errors import TransportError
from pymq.protocol.codes import ResponseCode
from pymq.protocol.filter import Subscription
from pymq.protocol.frame import Command
from pymq.protocol.requests import FLAG_COMMIT_OFFSET
from pymq.protocol.route import BrokerData, MessageQueue, QueueData, TopicRouteData

MASTER, SLAVE1, SLAVE2 = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"
Q0 = MessageQueue("t", "broker-a", 0)
Q1 = MessageQueue("t", "broker-a", 1)


def cache(addrs: dict[int, str]) -> RouteCache:
    async def fetch(topic: str) -> TopicRouteData | None:
        return None

    routes = RouteCache(fetch)
    routes.put(
        "t",
        TopicRouteData(
            queueDatas=[QueueData("broker-a", 2, 2, 6)], brokerDatas=[BrokerData("c", "broker-a", dict(addrs))]
        ),
    )
    return routes


def test_pull_addr_follows_rocketmq_find_broker_address_in_subscribe() -> None:
    routes = cache({0: MASTER, 1: SLAVE1, 2: SLAVE2})
    assert routes.pull_addr("broker-a") == (MASTER, False)
    assert routes.pull_addr("broker-a", 1) == (SLAVE1, True)
    assert routes.pull_addr("broker-a", 2) == (SLAVE2, True)
    assert routes.pull_addr("broker-a", 3) == (MASTER, False)  # neither 3 nor 4: the master
    assert routes.pull_addr("nope") is None
    routes = cache({0: MASTER, 2: SLAVE2})
    assert routes.pull_addr("broker-a", 1) == (SLAVE2, True)  # the next id
    routes = cache({1: SLAVE1, 2: SLAVE2})  # the master is gone
    assert routes.pull_addr("broker-a") == (SLAVE1, True)
    assert routes.broker_addr("broker-a") is None  # writes, locks and commits need the master


def test_pull_nodes_remember_suggestions_per_queue_unless_told_not_to() -> None:
    nodes = PullNodes()
    assert nodes.broker_id(Q0) == 0
    nodes.suggested(Q0, 1)
    assert (nodes.broker_id(Q0), nodes.broker_id(Q1)) == (1, 0)
    nodes.suggested(Q0, 0)
    assert nodes.broker_id(Q0) == 0 and nodes.table == {}
    off = PullNodes(follow=False)
    off.suggested(Q0, 1)
    assert off.broker_id(Q0) == 0


class FakeRpc:
    def __init__(self) -> None:
        self.up: set[str] = set()
        self.offsets: dict[tuple[str, int], int] = {}
        self.sent: list[tuple[str, int, int]] = []

    async def invoke_ok(self, addr: str, cmd: Command, timeout: float) -> Command:
        if addr not in self.up:
            raise TransportError(f"{addr} is down")
        qid = int(cmd.ext["queueId"])
        if "commitOffset" in cmd.ext:
            self.sent.append((addr, qid, int(cmd.ext["commitOffset"])))
            self.offsets[(addr, qid)] = int(cmd.ext["commitOffset"])
            return cmd.response(0)
        return cmd.response(0, None, {"offset": self.offsets.get((addr, qid), -1)})


class FakeInstance:
    def __init__(self, addrs: dict[int, str]) -> None:
        self.routes = cache(addrs)
        self.rpc = FakeRpc()
        self.config: Any = type("Cfg", (), {"rpc_timeout_seconds": 1.0})()
        self.route_updates = 0

    def broker_addr(self, name: str, *, master_only: bool = True) -> str | None:
        return self.routes.broker_addr(name, master_only=master_only)

    async def update_route(self, topic: str) -> None:
        self.route_updates += 1


async def test_offsets_wait_in_the_client_while_the_master_is_away() -> None:
    inst = FakeInstance({1: SLAVE1})  # the master is gone
    inst.rpc.up = {SLAVE1}
    inst.rpc.offsets[(SLAVE1, 0)] = 5  # the slave's copy of the group's offset
    store = RemoteOffsetStore(inst, "g")  # type: ignore[arg-type]
    assert await store.read(Q0) == 5  # read from the slave's copy
    store.update(Q0, 9)
    store.update(Q1, 4)
    inst.route_updates = 0
    await store.persist([Q0, Q1])
    assert inst.rpc.sent == [] and inst.route_updates == 1  # never the slave; one route look-up per round
    store.remove(Q1)  # given up meanwhile: its offset waits for the master
    assert store.pending == {Q1: 4}
    assert store.unacknowledged() == {Q0: 9, Q1: 4}
    assert await store.read(Q0) == 5 and store.read_memory(Q0) == 9  # a read-back leaves progress alone

    inst.routes = cache({0: MASTER, 1: SLAVE1})  # the master is back
    inst.rpc.up = {MASTER, SLAVE1}
    await store.persist([Q0])
    assert sorted(inst.rpc.sent) == [(MASTER, 0, 9), (MASTER, 1, 4)]
    assert store.pending == {} and store.unacknowledged() == {}
    store.remove(Q0)  # committed already: nothing pending
    assert store.pending == {}


async def test_a_pending_offset_never_moves_the_group_back() -> None:
    """A given-up queue's new owner may have committed further by the time the master is back."""
    inst = FakeInstance({1: SLAVE1})
    inst.rpc.up = {SLAVE1}
    store = RemoteOffsetStore(inst, "g")  # type: ignore[arg-type]
    store.update(Q0, 9)
    store.update(Q1, 9)
    store.remove(Q0)
    store.remove(Q1)
    inst.routes = cache({0: MASTER, 1: SLAVE1})
    inst.rpc.up = {MASTER, SLAVE1}
    inst.rpc.offsets[(MASTER, 0)] = 12  # the new owner's
    inst.rpc.offsets[(MASTER, 1)] = 3
    await store.persist([])
    assert inst.rpc.sent == [(MASTER, 1, 9)] and store.pending == {}
    assert inst.rpc.offsets[(MASTER, 0)] == 12


async def test_a_queue_taken_back_resumes_from_its_pending_offset() -> None:
    inst = FakeInstance({1: SLAVE1})
    inst.rpc.up = {SLAVE1}
    store = RemoteOffsetStore(inst, "g")  # type: ignore[arg-type]
    store.update(Q0, 7)
    store.remove(Q0)
    assert await store.read(Q0) == 7  # ahead of the slave's copy (none)
    assert store.read_memory(Q0) == 7 and store.pending == {}  # and still to be committed


async def test_a_pull_to_a_slave_never_carries_the_commit_flag() -> None:
    """The offset stays in the client's store: the flag goes to masters only."""
    sent: list[tuple[str, Command]] = []

    class Rpc:
        async def invoke(self, addr: str, cmd: Command, timeout: float) -> Command:
            sent.append((addr, cmd))
            return cmd.response(ResponseCode.PULL_NOT_FOUND, None, {"nextBeginOffset": 3, "suggestWhichBrokerId": 1})

    inst: Any = FakeInstance({0: MASTER, 1: SLAVE1})
    inst.rpc = Rpc()
    nodes = PullNodes()
    sub = Subscription.parse("t", "*")
    await pull(inst, Q0, "g", 3, sub, commit_offset=2, nodes=nodes)  # to the master, which suggests 1
    result = await pull(inst, Q0, "g", 3, sub, commit_offset=2, nodes=nodes)  # to the slave
    assert [a for a, _ in sent] == [MASTER, SLAVE1] and result.from_slave
    assert sent[0][1].ext["sysFlag"] & FLAG_COMMIT_OFFSET and sent[0][1].ext["commitOffset"] == 2
    assert not sent[1][1].ext["sysFlag"] & FLAG_COMMIT_OFFSET and sent[1][1].ext["commitOffset"] == -1
