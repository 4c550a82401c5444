"""The nameserver's RouteRegistry: registration, routes and expiry, with a fake clock."""

from __future__ import annotations

import pytest

from pymq.nameserver.registry import RouteRegistry
from pymq.protocol.route import MASTER_ID, PERM_READ, QueueData, TopicConfig

A_MASTER, A_SLAVE, B_MASTER = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def reg(clock: FakeClock) -> RouteRegistry:
    return RouteRegistry(expiry_seconds=120.0, clock=clock)


def topics(*names: str, queues: int = 4, perm: int = 6) -> dict[str, TopicConfig]:
    return {n: TopicConfig(n, queues, queues, perm) for n in names}


def test_registration_creates_tables(reg: RouteRegistry, clock: FakeClock) -> None:
    """A master's registration fills clusters, brokers, live info and topic queue tables."""
    res = reg.register_broker(
        "C1",
        A_MASTER,
        "broker-a",
        MASTER_ID,
        topic_configs=topics("T1", "T2"),
        data_version=1,
        ha_server_addr="10.0.0.1:10912",
    )
    assert res.master_addr is None and res.ha_server_addr is None
    assert reg.clusters == {"C1": {"broker-a"}}
    assert reg.brokers["broker-a"].brokerAddrs == {0: A_MASTER}
    assert reg.brokers["broker-a"].cluster == "C1"
    assert reg.live[A_MASTER].last_update == clock.now and reg.live[A_MASTER].data_version == 1
    assert reg.topic_queues["T1"]["broker-a"] == QueueData("broker-a", 4, 4, 6, 0)
    assert reg.topics() == ["T1", "T2"]
    info = reg.cluster_info()
    assert info["clusterAddrTable"] == {"C1": ["broker-a"]}
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {0: A_MASTER}


def test_slave_queue_data_ignored_and_master_addr_returned(reg: RouteRegistry) -> None:
    """A slave's topic configs are ignored; its registration returns the master and HA address."""
    res = reg.register_broker("C1", A_SLAVE, "broker-a", 1, topic_configs=topics("T1"), data_version=1)
    assert res.master_addr is None
    assert reg.topic_queues == {}
    reg.register_broker(
        "C1",
        A_MASTER,
        "broker-a",
        0,
        topic_configs=topics("T1"),
        data_version=1,
        ha_server_addr="10.0.0.1:10912",
    )
    res = reg.register_broker("C1", A_SLAVE, "broker-a", 1, topic_configs=topics("T9"), data_version=2)
    assert res.master_addr == A_MASTER and res.ha_server_addr == "10.0.0.1:10912"
    assert reg.topics() == ["T1"]
    assert reg.brokers["broker-a"].brokerAddrs == {0: A_MASTER, 1: A_SLAVE}


def test_queue_data_only_on_first_or_version_change(reg: RouteRegistry) -> None:
    """Heartbeats with an unchanged data version leave queue data alone; a new version replaces it."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1", queues=4), data_version=1)
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1", "T2", queues=8), data_version=1)
    assert reg.topics() == ["T1"] and reg.topic_queues["T1"]["broker-a"].readQueueNums == 4
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T2", queues=8), data_version=2)
    assert reg.topics() == ["T2"] and reg.topic_queues["T2"]["broker-a"].writeQueueNums == 8


def test_heartbeat_without_configs_keeps_queue_data(reg: RouteRegistry, clock: FakeClock) -> None:
    """A heartbeat carrying no topic configs refreshes liveness and keeps queue data."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    clock.now += 100
    reg.register_broker("C1", A_MASTER, "broker-a", 0, data_version=2)
    assert reg.topics() == ["T1"] and reg.live[A_MASTER].last_update == clock.now


def test_route_contents_and_ordering(reg: RouteRegistry) -> None:
    """route() lists queue data and broker data sorted by broker name, and None for unknown topics."""
    reg.register_broker("C1", B_MASTER, "broker-b", 0, topic_configs=topics("T1", queues=2), data_version=1)
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1", "T0"), data_version=1)
    reg.register_broker("C1", A_SLAVE, "broker-a", 1)
    route = reg.route("T1")
    assert route is not None
    assert [q.brokerName for q in route.queueDatas] == ["broker-a", "broker-b"]
    assert [q.readQueueNums for q in route.queueDatas] == [4, 2]
    assert [b.brokerName for b in route.brokerDatas] == ["broker-a", "broker-b"]
    assert route.broker("broker-a").brokerAddrs == {0: A_MASTER, 1: A_SLAVE}
    assert route.to_dict()["queueDatas"][0]["brokerName"] == "broker-a"
    assert reg.topics() == ["T0", "T1"]
    assert reg.route("nope") is None
    route.brokerDatas[0].brokerAddrs.clear()  # a copy: the registry is untouched
    assert reg.brokers["broker-a"].brokerAddrs == {0: A_MASTER, 1: A_SLAVE}


def test_expiry_after_not_before(reg: RouteRegistry, clock: FakeClock) -> None:
    """A broker silent for exactly expiry_seconds survives; a moment later it is removed."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    clock.now += 60
    reg.register_broker("C1", B_MASTER, "broker-b", 0, topic_configs=topics("T1"), data_version=1)
    clock.now += 60
    assert reg.scan_expired() == []
    clock.now += 0.001
    assert reg.scan_expired() == [A_MASTER]
    assert "broker-a" not in reg.brokers and A_MASTER not in reg.live
    assert [q.brokerName for q in reg.route("T1").queueDatas] == ["broker-b"]
    clock.now += 60
    assert reg.scan_expired() == [B_MASTER]
    assert reg.route("T1") is None and reg.topics() == [] and reg.clusters == {} and reg.brokers == {}


def test_heartbeat_postpones_expiry(reg: RouteRegistry, clock: FakeClock) -> None:
    """A fresh heartbeat resets the expiry window."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, data_version=1)
    clock.now += 100
    reg.register_broker("C1", A_MASTER, "broker-a", 0, data_version=1)
    clock.now += 100
    assert reg.scan_expired() == []


def test_master_gone_slave_alive_keeps_queue_data(reg: RouteRegistry, clock: FakeClock) -> None:
    """When only the master expires its queue data stays and the route lists the slave alone."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    clock.now += 100
    reg.register_broker("C1", A_SLAVE, "broker-a", 1)
    clock.now += 21
    assert reg.scan_expired() == [A_MASTER]
    route = reg.route("T1")
    assert route is not None and route.queueDatas[0].brokerName == "broker-a"
    assert route.brokerDatas[0].brokerAddrs == {1: A_SLAVE}
    assert route.brokerDatas[0].master_addr is None and route.brokerDatas[0].select_addr() == A_SLAVE
    assert reg.clusters == {"C1": {"broker-a"}}
    res = reg.register_broker("C1", A_SLAVE, "broker-a", 1)
    assert res.master_addr is None


def test_last_address_gone_removes_queue_data_everywhere(reg: RouteRegistry) -> None:
    """When a group's last address goes its queues leave every topic; empty topics and clusters go too."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1", "T2"), data_version=1)
    reg.register_broker("C1", A_SLAVE, "broker-a", 1)
    reg.register_broker("C2", B_MASTER, "broker-b", 0, topic_configs=topics("T2"), data_version=1)
    assert reg.remove_addr(A_MASTER) is True
    assert reg.topics() == ["T1", "T2"]
    assert reg.remove_addr(A_SLAVE) is True
    assert reg.topics() == ["T2"]
    assert list(reg.topic_queues["T2"]) == ["broker-b"]
    assert reg.clusters == {"C2": {"broker-b"}}
    assert "broker-a" not in reg.brokers
    assert reg.route("T1") is None


def test_remove_addr_unknown(reg: RouteRegistry) -> None:
    """remove_addr of an unknown address returns False and changes nothing."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    assert reg.remove_addr("1.1.1.1:1") is False
    assert reg.topics() == ["T1"] and reg.brokers["broker-a"].brokerAddrs == {0: A_MASTER}


def test_role_change_drops_stale_id(reg: RouteRegistry) -> None:
    """The same address re-registering under a new broker id loses its old id entry."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    reg.register_broker("C1", A_SLAVE, "broker-a", 1)
    reg.register_broker("C1", A_MASTER, "broker-a", 2)  # old master demoted
    reg.register_broker("C1", A_SLAVE, "broker-a", 0, topic_configs=topics("T1"), data_version=1)  # promoted
    assert reg.brokers["broker-a"].brokerAddrs == {0: A_SLAVE, 2: A_MASTER}
    assert reg.live[A_MASTER].broker_id == 2 and reg.live[A_SLAVE].broker_id == 0
    assert reg.topics() == ["T1"]


def test_promoted_slave_first_master_registration_applies_configs(reg: RouteRegistry) -> None:
    """A slave promoted to master applies its topic configs even with an unchanged data version."""
    reg.register_broker("C1", A_SLAVE, "broker-a", 1, topic_configs=topics("T1"), data_version=5)
    assert reg.topics() == []
    reg.register_broker("C1", A_SLAVE, "broker-a", 0, topic_configs=topics("T1"), data_version=5)
    assert reg.topics() == ["T1"]


def test_unregister_broker(reg: RouteRegistry) -> None:
    """unregister_broker removes that id; the last id takes the group's queues and cluster entry."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    reg.register_broker("C1", A_SLAVE, "broker-a", 1)
    reg.unregister_broker("C1", A_MASTER, "broker-a", 0)
    assert reg.brokers["broker-a"].brokerAddrs == {1: A_SLAVE} and reg.topics() == ["T1"]
    reg.unregister_broker("C1", A_SLAVE, "broker-a", 1)
    assert reg.brokers == {} and reg.clusters == {} and reg.topics() == [] and reg.live == {}


def test_delete_topic(reg: RouteRegistry) -> None:
    """delete_topic removes the topic's route and reports whether it existed."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1", "T2"), data_version=1)
    assert reg.delete_topic("T1") is True
    assert reg.delete_topic("T1") is False
    assert reg.route("T1") is None and reg.topics() == ["T2"]
    assert reg.brokers["broker-a"].brokerAddrs == {0: A_MASTER}


def test_queue_perm_and_sysflag_copied(reg: RouteRegistry) -> None:
    """QueueData copies read/write counts, perm and topicSysFlag from the topic config."""
    tc = TopicConfig("T1", readQueueNums=3, writeQueueNums=5, perm=PERM_READ, topicSysFlag=1)
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs={"T1": tc}, data_version=1)
    assert reg.route("T1").queueDatas == [QueueData("broker-a", 3, 5, PERM_READ, 1)]


def test_reregistration_after_expiry_restores_route(reg: RouteRegistry, clock: FakeClock) -> None:
    """A broker that expired and registers again with the same data version gets its queues back."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    clock.now += 500
    reg.scan_expired()
    assert reg.route("T1") is None
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    assert reg.route("T1") is not None


def test_master_away_and_back_keeps_the_broker_name_routable(reg: RouteRegistry, clock: FakeClock) -> None:
    """Master expires (slave keeps the name readable, not writable), then returns at a new address."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    reg.register_broker("C1", A_SLAVE, "broker-a", 1, topic_configs=topics("T1"), data_version=1)
    clock.now += 100
    reg.register_broker("C1", A_SLAVE, "broker-a", 1, topic_configs=topics("T1"), data_version=1)
    clock.now += 21
    assert reg.scan_expired() == [A_MASTER]
    route = reg.route("T1")
    assert route is not None and route.queueDatas == [QueueData("broker-a", 4, 4, 6, 0)]
    assert route.brokerDatas[0].brokerAddrs == {1: A_SLAVE}
    assert reg.cluster_info()["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {1: A_SLAVE}
    # The slave's heartbeats (with its own topics) never rewrite the queue data.
    reg.register_broker("C1", A_SLAVE, "broker-a", 1, topic_configs=topics("T1", "T9", queues=8), data_version=2)
    assert reg.topics() == ["T1"] and reg.topic_queues["T1"]["broker-a"].readQueueNums == 4
    # The master restarts elsewhere (same data version): its configs apply again, the slave stays.
    restarted = "10.0.0.9:10911"
    res = reg.register_broker("C1", restarted, "broker-a", 0, topic_configs=topics("T1", "T2"), data_version=1)
    assert res.master_addr is None
    assert reg.route("T1").brokerDatas[0].brokerAddrs == {0: restarted, 1: A_SLAVE}
    assert reg.topics() == ["T1", "T2"]
    assert reg.register_broker("C1", A_SLAVE, "broker-a", 1).master_addr == restarted


def test_master_unregistering_cleanly_leaves_the_slave_routed(reg: RouteRegistry) -> None:
    """A master that stops (UNREGISTER_BROKER) or whose channel closes leaves queue data and the slave."""
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    reg.register_broker("C1", A_SLAVE, "broker-a", 1)
    reg.register_broker("C1", B_MASTER, "broker-b", 0, topic_configs=topics("T1"), data_version=1)
    reg.unregister_broker("C1", A_MASTER, "broker-a", 0)
    route = reg.route("T1")
    assert [q.brokerName for q in route.queueDatas] == ["broker-a", "broker-b"]
    assert route.broker("broker-a").brokerAddrs == {1: A_SLAVE}
    reg.register_broker("C1", A_MASTER, "broker-a", 0, topic_configs=topics("T1"), data_version=1)
    assert reg.remove_addr(A_MASTER) is True  # closed channel
    assert reg.route("T1").broker("broker-a").brokerAddrs == {1: A_SLAVE}


def test_a_slave_alone_does_not_create_routes(reg: RouteRegistry) -> None:
    """As RocketMQ (without acting-master mode): queue data comes from a master only, so a slave
    registering on a fresh nameserver while its master is down makes no route yet."""
    reg.register_broker("C1", A_SLAVE, "broker-a", 1, topic_configs=topics("T1"), data_version=1)
    assert reg.route("T1") is None
    assert reg.cluster_info()["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {1: A_SLAVE}
