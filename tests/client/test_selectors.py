"""Producer queue selection: write queues from a route, round robin, latency fault tolerance,
and the ordered-send selectors. A fake clock stands in for time."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import pytest

from pymq.client.selectors import (
    LatencyAwareSelector,
    LatencyFaultTable,
    MessageQueueSelector,
    QueueSelectionStrategy,
    RoundRobinSelector,
    SelectByHash,
    SelectByModulo,
    SelectByRandom,
    write_queues,
)
from pymq.errors import NoRouteError
from pymq.protocol.route import (
    PERM_READ,
    PERM_READ_WRITE,
    BrokerData,
    MessageQueue,
    QueueData,
    TopicRouteData,
)

TOPIC = "TopicTest"
REPO_ROOT = Path(__file__).resolve().parents[2]


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def mqs(*brokers: str, n: int = 4, topic: str = TOPIC) -> list[MessageQueue]:
    return [MessageQueue(topic, b, i) for b in brokers for i in range(n)]


def brokers_of(selected: list[MessageQueue]) -> set[str]:
    return {q.brokerName for q in selected}


# --- write_queues ---------------------------------------------------------------------------------


def broker(name: str, ids: tuple[int, ...] = (0,)) -> BrokerData:
    return BrokerData("c1", name, {i: f"10.0.0.{i + 1}:10911" for i in ids})


def test_write_queues_sorted_by_broker_name() -> None:
    """Queues come broker by broker in name order, ids 0..writeQueueNums-1."""
    route = TopicRouteData(
        queueDatas=[QueueData("broker-b", 4, 2), QueueData("broker-a", 8, 3)],
        brokerDatas=[broker("broker-b"), broker("broker-a")],
    )
    assert write_queues(TOPIC, route) == [
        MessageQueue(TOPIC, "broker-a", 0),
        MessageQueue(TOPIC, "broker-a", 1),
        MessageQueue(TOPIC, "broker-a", 2),
        MessageQueue(TOPIC, "broker-b", 0),
        MessageQueue(TOPIC, "broker-b", 1),
    ]


def test_write_queues_skip_unwritable_and_masterless() -> None:
    """Brokers without write permission, without a master, or without BrokerData are skipped."""
    route = TopicRouteData(
        queueDatas=[
            QueueData("ro", 4, 4, perm=PERM_READ),
            QueueData("slave-only", 4, 4, perm=PERM_READ_WRITE),
            QueueData("unknown", 4, 4),
            QueueData("ok", 4, 1),
        ],
        brokerDatas=[broker("ro"), broker("slave-only", ids=(1,)), broker("ok")],
    )
    assert write_queues(TOPIC, route) == [MessageQueue(TOPIC, "ok", 0)]


def test_write_queues_empty_route() -> None:
    """An empty route has no write queues."""
    assert write_queues(TOPIC, TopicRouteData()) == []


# --- round robin ----------------------------------------------------------------------------------


def test_round_robin_cycles_evenly() -> None:
    """Round robin visits every queue equally often, in order."""
    queues = mqs("a", "b")
    sel = RoundRobinSelector(start=0)
    picked = [sel.select(queues, None) for _ in range(80)]
    assert picked[:8] == queues[1:] + queues[:1]
    assert set(Counter(picked).values()) == {10}


def test_round_robin_random_start_still_even() -> None:
    """With a random starting counter the distribution is still exactly even over full cycles."""
    queues = mqs("a", "b", "c", n=3)
    sel = RoundRobinSelector()
    assert set(Counter(sel.select(queues, None) for _ in range(90)).values()) == {10}


def test_round_robin_negative_start_uses_abs() -> None:
    """The position is abs(++i) % n, so a negative counter still yields valid queues."""
    queues = mqs("a", n=3)
    sel = RoundRobinSelector(start=-3)
    assert [sel.select(queues, None).queueId for _ in range(5)] == [2, 1, 0, 1, 2]


def test_round_robin_counters_are_per_topic() -> None:
    """Alternating between topics does not pin either topic to a subset of its queues."""
    t1, t2 = mqs("a", n=2, topic="T1"), mqs("a", n=2, topic="T2")
    sel = RoundRobinSelector(start=0)
    picks1, picks2 = [], []
    for _ in range(10):
        picks1.append(sel.select(t1, None))
        picks2.append(sel.select(t2, None))
    assert set(Counter(picks1).values()) == {5}
    assert set(Counter(picks2).values()) == {5}


def test_round_robin_retry_skips_last_broker() -> None:
    """A retry never picks a queue of the broker that just failed when another broker exists."""
    queues = mqs("a", "b", "c")
    sel = RoundRobinSelector()
    picked = [sel.select(queues, "b") for _ in range(30)]
    assert brokers_of(picked) == {"a", "c"}


def test_round_robin_retry_single_broker_reuses_it() -> None:
    """A retry with only the last broker available still returns one of its queues."""
    queues = mqs("a")
    assert RoundRobinSelector().select(queues, "a").brokerName == "a"


def test_round_robin_update_is_noop_and_empty_raises() -> None:
    """Round robin ignores updates and raises NoRouteError when there are no queues."""
    sel = RoundRobinSelector(start=0)
    sel.update("a", 99999, True)
    assert sel.select(mqs("a"), None).brokerName == "a"
    with pytest.raises(NoRouteError):
        sel.select([], None)


def test_selectors_satisfy_protocol() -> None:
    """Both producer strategies match the QueueSelectionStrategy protocol."""
    assert isinstance(RoundRobinSelector(), QueueSelectionStrategy)
    assert isinstance(LatencyAwareSelector(), QueueSelectionStrategy)


# --- latency fault tolerance ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("latency", "duration"),
    [
        (0, 0),
        (49, 0),
        (100, 0),
        (549, 0),
        (550, 2000),
        (1799, 2000),
        (1800, 5000),
        (3000, 6000),
        (5000, 10000),
        (14999, 10000),
        (15000, 30000),
        (99999, 30000),
    ],
)
def test_not_available_duration_table(latency: float, duration: float) -> None:
    """Latency maps to avoid-duration through the 5.1.4+ tables."""
    assert LatencyAwareSelector().not_available_duration(latency) == duration


def test_latency_tables_validated() -> None:
    """Mismatched or unsorted latency tables are rejected."""
    with pytest.raises(ValueError):
        LatencyAwareSelector(latency_max=(1, 2), not_available_ms=(0,))
    with pytest.raises(ValueError):
        LatencyAwareSelector(latency_max=(2, 1), not_available_ms=(0, 0))


def test_latency_aware_avoids_slow_broker_then_recovers() -> None:
    """A slow send avoids the broker for its mapped duration, then it is used again."""
    clock = FakeClock()
    sel = LatencyAwareSelector(clock=clock)
    queues = mqs("a", "b")
    sel.update("a", 600, isolation=False)  # >= 550 ms -> 2 s
    assert brokers_of([sel.select(queues, None) for _ in range(40)]) == {"b"}
    clock.advance(1.999)
    assert brokers_of([sel.select(queues, None) for _ in range(40)]) == {"b"}
    clock.advance(0.001)
    assert brokers_of([sel.select(queues, None) for _ in range(40)]) == {"a", "b"}


def test_latency_aware_fast_sends_do_not_isolate() -> None:
    """Sends under 550 ms leave the broker available."""
    sel = LatencyAwareSelector(clock=FakeClock())
    sel.update("a", 120, isolation=False)
    assert brokers_of([sel.select(mqs("a", "b"), None) for _ in range(16)]) == {"a", "b"}


def test_latency_aware_isolation_uses_longest_duration() -> None:
    """A failed send counts as 30 s latency and avoids the broker for 30 s."""
    clock = FakeClock()
    sel = LatencyAwareSelector(clock=clock)
    sel.update("a", 5, isolation=True)
    item = sel.fault_table.get("a")
    assert item is not None and item.latency_ms == 30000
    clock.advance(29.9)
    assert brokers_of([sel.select(mqs("a", "b"), None) for _ in range(20)]) == {"b"}
    clock.advance(0.1)
    assert sel.fault_table.is_available("a")


def test_latency_aware_retry_prefers_other_available_broker() -> None:
    """On a retry, available brokers other than the last one are preferred."""
    sel = LatencyAwareSelector(clock=FakeClock())
    picked = [sel.select(mqs("a", "b", "c"), "a") for _ in range(30)]
    assert brokers_of(picked) == {"b", "c"}


def test_latency_aware_retry_falls_back_to_last_if_only_available() -> None:
    """If the last broker is the only available one, a retry still uses it."""
    sel = LatencyAwareSelector(clock=FakeClock())
    sel.update("b", 0, isolation=True)
    assert brokers_of([sel.select(mqs("a", "b"), "a") for _ in range(10)]) == {"a"}


def test_latency_aware_all_unavailable_picks_better_half() -> None:
    """With every broker avoided, the pick comes from the half that recovers soonest."""
    clock = FakeClock()
    sel = LatencyAwareSelector(clock=clock)
    sel.update("a", 16000, isolation=False)  # 30 s
    sel.update("b", 600, isolation=False)  # 2 s
    sel.update("c", 3500, isolation=False)  # 6 s
    sel.update("d", 1900, isolation=False)  # 5 s
    picked = [sel.select(mqs("a", "b", "c", "d"), None) for _ in range(40)]
    assert brokers_of(picked) == {"b", "d"}


def test_latency_aware_all_unavailable_single_broker() -> None:
    """With one avoided broker, its queues are still used, round robin."""
    sel = LatencyAwareSelector(clock=FakeClock(), start=0)
    sel.update("a", 0, isolation=True)
    picked = [sel.select(mqs("a"), None) for _ in range(8)]
    assert set(Counter(picked).values()) == {2}


def test_latency_aware_all_unavailable_retry_skips_last() -> None:
    """With every broker avoided, a retry still moves away from the last broker."""
    sel = LatencyAwareSelector(clock=FakeClock())
    sel.update("a", 0, isolation=True)
    sel.update("b", 0, isolation=True)
    assert brokers_of([sel.select(mqs("a", "b"), "b") for _ in range(10)]) == {"a"}


def test_latency_aware_ignores_unrelated_fault_items() -> None:
    """Fault records for brokers outside this topic's queues do not affect the choice."""
    sel = LatencyAwareSelector(clock=FakeClock())
    sel.update("elsewhere", 10, isolation=False)
    sel.update("a", 0, isolation=True)
    assert brokers_of([sel.select(mqs("a"), None) for _ in range(5)]) == {"a"}


def test_latency_aware_empty_raises() -> None:
    """No queues raises NoRouteError."""
    with pytest.raises(NoRouteError):
        LatencyAwareSelector().select([], None)


def test_fault_table_basics() -> None:
    """Unknown brokers are available; update avoids until now+duration; remove forgets."""
    clock = FakeClock()
    table = LatencyFaultTable(clock)
    assert table.is_available("x")
    table.update("x", 700, 2000)
    assert not table.is_available("x") and len(table) == 1
    table.remove("x")
    assert table.is_available("x") and len(table) == 0
    assert table.pick_one_at_least([]) is None


def test_fault_table_pick_rotates_over_better_half() -> None:
    """pick_one_at_least takes the better half in turn, ordered by (available_at, latency)."""
    table = LatencyFaultTable(FakeClock())
    table.update("slow", 900, 5000)
    table.update("fast", 600, 5000)
    table.update("soon", 9000, 1000)
    table.update("late", 100, 9000)
    picks = Counter(table.pick_one_at_least(["slow", "fast", "soon", "late"]) for _ in range(10))
    assert picks == {"soon": 5, "fast": 5}


# --- ordered-send selectors -----------------------------------------------------------------------


def test_select_by_hash_uses_crc32_of_str() -> None:
    """Non-int args map to queues[crc32(str(arg)) % n]."""
    queues = mqs("a", "b", n=4)
    for arg in ["order-1", "order-2", "ключ", 3.5, ("x", 1)]:
        expected = queues[zlib.crc32(str(arg).encode("utf-8")) % len(queues)]
        assert SelectByHash()(queues, None, arg) == expected


def test_select_by_hash_int_uses_abs() -> None:
    """Int args map to queues[abs(arg) % n]."""
    queues = mqs("a", n=5)
    assert SelectByHash()(queues, None, 7).queueId == 2
    assert SelectByHash()(queues, None, -7).queueId == 2


def test_select_by_hash_same_key_same_queue() -> None:
    """The same key always maps to the same queue."""
    queues = mqs("a", "b", n=8)
    sel = SelectByHash()
    assert len({sel(queues, None, "order-42") for _ in range(20)}) == 1


def test_select_by_hash_stable_across_processes() -> None:
    """A key maps to the same queue in processes with different hash seeds."""
    code = (
        "from pymq.client.selectors import SelectByHash;"
        "from pymq.protocol.route import MessageQueue;"
        "qs=[MessageQueue('T','b',i) for i in range(16)];"
        "print(','.join(str(SelectByHash()(qs,None,k).queueId) for k in ['a','order-7','xyz']))"
    )
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        outputs.add(out)
    expected = ",".join(str(zlib.crc32(k.encode()) % 16) for k in ["a", "order-7", "xyz"])
    assert outputs == {expected}


def test_select_by_modulo() -> None:
    """Modulo selection uses abs(arg) % n and requires an int."""
    queues = mqs("a", n=4)
    assert SelectByModulo()(queues, None, 6).queueId == 2
    assert SelectByModulo()(queues, None, -5).queueId == 1
    with pytest.raises(TypeError):
        SelectByModulo()(queues, None, "6")
    with pytest.raises(TypeError):
        SelectByModulo()(queues, None, True)


def test_select_by_random_covers_all_queues() -> None:
    """Random selection returns queues from the list and, over many picks, all of them."""
    queues = mqs("a", "b", n=2)
    sel = SelectByRandom(random.Random(1))
    assert set(sel(queues, None, None) for _ in range(200)) == set(queues)


def test_ordered_selectors_satisfy_protocol_and_reject_empty() -> None:
    """Built-in ordered selectors match MessageQueueSelector and raise NoRouteError on no queues."""
    for sel in (SelectByHash(), SelectByModulo(), SelectByRandom()):
        assert isinstance(sel, MessageQueueSelector)
        with pytest.raises(NoRouteError):
            sel([], None, 1)
