"""Consumer queue allocation strategies, checked against the fact sheet's worked examples."""

from __future__ import annotations

import random

import pytest

from pymq.client.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateStrategy,
    md5_hash,
    strategy_by_name,
)
from pymq.errors import ConfigError
from pymq.protocol.route import MessageQueue

GROUP = "cg"
CIDS = ["c0", "c1", "c2"]


def queues(n: int = 8, topic: str = "TopicTest", broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def ids(mqs: list[MessageQueue]) -> list[int]:
    return [mq.queueId for mq in mqs]


def shares(strategy: AllocateStrategy, mqs: list[MessageQueue], cids: list[str]) -> dict[str, list[int]]:
    return {cid: ids(strategy.allocate(GROUP, cid, mqs, cids)) for cid in cids}


ALL_STRATEGIES = [
    AllocateAveragely(),
    AllocateAveragelyByCircle(),
    AllocateConsistentHash(),
]


def test_averagely_worked_example() -> None:
    """Averagely gives 8 queues to 3 consumers as q0-2, q3-5, q6-7."""
    assert shares(AllocateAveragely(), queues(), CIDS) == {
        "c0": [0, 1, 2],
        "c1": [3, 4, 5],
        "c2": [6, 7],
    }


def test_averagely_more_consumers_than_queues() -> None:
    """Averagely gives one queue each to the first N consumers and nothing to the surplus."""
    cids = [f"c{i}" for i in range(5)]
    assert shares(AllocateAveragely(), queues(3), cids) == {
        "c0": [0],
        "c1": [1],
        "c2": [2],
        "c3": [],
        "c4": [],
    }


def test_averagely_equal_counts() -> None:
    """Averagely gives one queue per consumer when counts are equal."""
    assert shares(AllocateAveragely(), queues(3), CIDS) == {"c0": [0], "c1": [1], "c2": [2]}


def test_circle_worked_example() -> None:
    """AveragelyByCircle deals queue i to consumer i % C."""
    assert shares(AllocateAveragelyByCircle(), queues(), CIDS) == {
        "c0": [0, 3, 6],
        "c1": [1, 4, 7],
        "c2": [2, 5],
    }


def test_circle_more_consumers_than_queues() -> None:
    """AveragelyByCircle leaves surplus consumers empty."""
    cids = [f"c{i}" for i in range(4)]
    assert shares(AllocateAveragelyByCircle(), queues(2), cids) == {"c0": [0], "c1": [1], "c2": [], "c3": []}


CH_CIDS = ["10.0.0.1@c1", "10.0.0.2@c2", "10.0.0.3@c3"]


def test_consistent_hash_worked_example() -> None:
    """ConsistentHash reproduces the fact sheet: c1={0}, c2={2,6}, c3={1,3,4,5,7} (TopicTest/broker-a)."""
    assert shares(AllocateConsistentHash(), queues(), CH_CIDS) == {
        "10.0.0.1@c1": [0],
        "10.0.0.2@c2": [2, 6],
        "10.0.0.3@c3": [1, 3, 4, 5, 7],
    }


def test_consistent_hash_worked_example_after_leave() -> None:
    """ConsistentHash after c3 leaves gives c1={0,1,7}, c2={2..6}, as in the fact sheet."""
    assert shares(AllocateConsistentHash(), queues(), CH_CIDS[:2]) == {
        "10.0.0.1@c1": [0, 1, 7],
        "10.0.0.2@c2": [2, 3, 4, 5, 6],
    }


def test_consistent_hash_leave_moves_only_leavers_queues() -> None:
    """ConsistentHash: removing a consumer moves only that consumer's queues."""
    mqs = queues(32, broker="broker-x") + queues(32, broker="broker-y")
    cids = [f"192.168.0.{i}@pid{i}" for i in range(6)]
    strategy = AllocateConsistentHash()
    before = {mq: cid for cid in cids for mq in strategy.allocate(GROUP, cid, mqs, cids)}
    gone = cids[2]
    rest = [c for c in cids if c != gone]
    after = {mq: cid for cid in rest for mq in strategy.allocate(GROUP, cid, mqs, rest)}
    for mq, owner in before.items():
        if owner != gone:
            assert after[mq] == owner


def test_md5_hash_is_first_four_bytes_big_endian() -> None:
    """md5_hash is the unsigned big-endian value of MD5's first 4 bytes."""
    # md5("") = d41d8cd98f00b204e9800998ecf8427e
    assert md5_hash("") == 0xD41D8CD9


def test_consistent_hash_custom_virtual_nodes() -> None:
    """ConsistentHash still partitions every queue exactly once with other virtual-node counts."""
    mqs = queues(16)
    for vn in (1, 3, 50):
        got = shares(AllocateConsistentHash(virtual_nodes=vn), mqs, CIDS)
        assert sorted(q for qs in got.values() for q in qs) == list(range(16))


def test_consistent_hash_rejects_zero_virtual_nodes() -> None:
    """ConsistentHash refuses fewer than one virtual node."""
    with pytest.raises(ValueError):
        AllocateConsistentHash(virtual_nodes=0)


ROOM_CIDS = CIDS


def test_machine_room_worked_example() -> None:
    """ByMachineRoom with all 8 queues in the room gives c0={0,1,6}, c1={2,3,7}, c2={4,5}."""
    mqs = queues(broker="hz@broker-a")
    assert shares(AllocateByMachineRoom({"hz"}), mqs, ROOM_CIDS) == {
        "c0": [0, 1, 6],
        "c1": [2, 3, 7],
        "c2": [4, 5],
    }


def test_machine_room_filters_other_rooms_and_bad_names() -> None:
    """ByMachineRoom ignores queues in other rooms and brokers not named room@x."""
    mqs = [*queues(4, broker="hz@a"), *queues(4, broker="sh@b"), *queues(4, broker="plain")]
    mqs += queues(2, broker="hz@c@d")
    got = {cid: AllocateByMachineRoom({"hz"}).allocate(GROUP, cid, mqs, ["c0", "c1"]) for cid in ["c0", "c1"]}
    assert {mq.brokerName for qs in got.values() for mq in qs} == {"hz@a"}
    assert [ids(got["c0"]), ids(got["c1"])] == [[0, 1], [2, 3]]


def test_by_config_returns_fixed_list_to_everyone() -> None:
    """ByConfig gives every consumer the configured queues."""
    fixed = queues(2)
    strategy = AllocateByConfig(fixed)
    assert shares(strategy, queues(), CIDS) == {"c0": [0, 1], "c1": [0, 1], "c2": [0, 1]}


@pytest.mark.parametrize(
    "strategy",
    [*ALL_STRATEGIES, AllocateByMachineRoom({"hz"}), AllocateByConfig(queues(2))],
    ids=repr,
)
def test_unknown_cid_gets_nothing(strategy: AllocateStrategy) -> None:
    """A consumer missing from the group's id list is allocated nothing."""
    assert strategy.allocate(GROUP, "stranger", queues(), CIDS) == []


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=repr)
def test_empty_queue_list_gives_nothing(strategy: AllocateStrategy) -> None:
    """No queues means an empty allocation, not an error."""
    assert strategy.allocate(GROUP, "c0", [], CIDS) == []


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=repr)
def test_empty_current_cid_is_rejected(strategy: AllocateStrategy) -> None:
    """An empty current consumer id raises ValueError."""
    with pytest.raises(ValueError):
        strategy.allocate(GROUP, "", queues(), CIDS)


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=repr)
def test_input_order_does_not_matter(strategy: AllocateStrategy) -> None:
    """Strategies sort queues and cids themselves, so shuffled input gives the same result."""
    mqs = queues(5, broker="b") + queues(7, broker="a") + queues(3, topic="Other", broker="a")
    cids = [f"10.0.0.{i}@{i}" for i in range(4)]
    expected = shares(strategy, sorted(mqs), sorted(cids))
    rng = random.Random(7)
    for _ in range(5):
        m, c = mqs[:], cids[:]
        rng.shuffle(m)
        rng.shuffle(c)
        assert shares(strategy, m, c) == expected


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=repr)
@pytest.mark.parametrize(("n_queues", "n_cids"), [(8, 3), (3, 5), (16, 4), (1, 1), (7, 7)])
def test_every_queue_assigned_exactly_once(strategy: AllocateStrategy, n_queues: int, n_cids: int) -> None:
    """Across the group, each queue is allocated to exactly one consumer."""
    mqs = queues(n_queues)
    cids = [f"cid-{i}" for i in range(n_cids)]
    assigned = [mq for cid in cids for mq in strategy.allocate(GROUP, cid, mqs, cids)]
    assert sorted(assigned) == mqs


def test_duplicate_cids_are_ignored() -> None:
    """A consumer id listed twice is counted once."""
    assert ids(AllocateAveragely().allocate(GROUP, "c2", queues(), [*CIDS, "c1"])) == [6, 7]


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("AVG", AllocateAveragely),
        ("avg", AllocateAveragely),
        ("AVG_BY_CIRCLE", AllocateAveragelyByCircle),
        ("consistent_hash", AllocateConsistentHash),
        ("AllocateAveragely", AllocateAveragely),
        ("allocateconsistenthash", AllocateConsistentHash),
        ("AllocateMessageQueueAveragelyByCircle", AllocateAveragelyByCircle),
    ],
)
def test_strategy_by_name(name: str, cls: type[AllocateStrategy]) -> None:
    """strategy_by_name accepts short and class names case-insensitively."""
    assert type(strategy_by_name(name)) is cls


def test_strategy_by_name_passes_kwargs() -> None:
    """strategy_by_name forwards keyword arguments to the constructor."""
    s = strategy_by_name("MACHINE_ROOM", consume_idcs={"hz"})
    assert isinstance(s, AllocateByMachineRoom) and s.consume_idcs == {"hz"}
    c = strategy_by_name("CONFIG", message_queues=queues(1))
    assert isinstance(c, AllocateByConfig) and c.message_queues == queues(1)
    h = strategy_by_name("CONSISTENT_HASH", virtual_nodes=3)
    assert isinstance(h, AllocateConsistentHash) and h.virtual_nodes == 3


def test_strategy_by_name_errors() -> None:
    """Unknown names and missing constructor arguments raise ConfigError."""
    with pytest.raises(ConfigError):
        strategy_by_name("NEAREST")
    with pytest.raises(ConfigError):
        strategy_by_name("MACHINE_ROOM")
