"""Broker bookkeeping without sockets: consumer groups, queue locks, held pulls, offsets, topics, groups."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pymq.broker.consumers import ConsumerManager
from pymq.broker.locks import QueueLockManager
from pymq.broker.long_polling import PullHoldService
from pymq.broker.offsets import ConsumerOffsetManager
from pymq.broker.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
from pymq.broker.topics import TopicConfigManager, validate_topic_name
from pymq.errors import InvalidRequestError
from pymq.protocol.filter import Subscription
from pymq.protocol.route import MessageQueue, TopicConfig


class FakeConn:
    def __init__(self, name: str) -> None:
        self.remote_addr = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def register(mgr: ConsumerManager, group: str, cid: str, conn: FakeConn) -> bool:
    return mgr.register(
        group, cid, conn, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",  # type: ignore[arg-type]
        consume_from_where="CONSUME_FROM_LAST_OFFSET", subscriptions=[Subscription.parse("t", "*")],
    )  # fmt: skip


def test_group_membership_changes_notify_the_rest() -> None:
    """Joining, leaving and closed connections notify the remaining members; heartbeats alone do not."""
    notes: list[tuple[str, list[str]]] = []
    mgr = ConsumerManager(notify=lambda g, chans: notes.append((g, sorted(c.client_id for c in chans))))
    a, b = FakeConn("a"), FakeConn("b")
    assert register(mgr, "g", "c1", a) and register(mgr, "g", "c2", b)
    assert not register(mgr, "g", "c1", a)  # a plain heartbeat
    assert mgr.client_ids("g") == ["c1", "c2"]
    mgr.channel_closed(b)  # type: ignore[arg-type]
    assert mgr.client_ids("g") == ["c1"] and notes[-1] == ("g", ["c1"])
    mgr.unregister("g", "c1")
    assert "g" not in mgr.groups


def test_silent_consumers_expire() -> None:
    """A consumer silent for longer than the expiry is dropped and its connection closed."""
    clock = Clock()
    mgr = ConsumerManager(expiry_seconds=120, clock=clock)
    conn = FakeConn("a")
    register(mgr, "g", "c1", conn)
    clock.now += 119
    assert mgr.scan_expired() == []
    clock.now += 2
    assert mgr.scan_expired() == [("g", "c1")] and conn.closed and mgr.client_ids("g") == []


def test_queue_locks_grant_renew_expire() -> None:
    """A lock is granted when free, renewed by its owner, refused to others, and free again after expiry."""
    clock = Clock()
    locks = QueueLockManager(60, clock)
    q = [MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)]
    assert locks.try_lock_batch("g", q, "c1") == set(q)
    assert locks.try_lock_batch("g", q, "c2") == set()
    clock.now += 59
    assert locks.try_lock_batch("g", q[:1], "c1") == {q[0]}  # renews q0 only
    clock.now += 2
    assert locks.try_lock_batch("g", q, "c2") == {q[1]}  # q1 expired, q0 was renewed
    locks.unlock_batch("g", [q[0]], "c2")  # not the owner: no effect
    assert locks.holder("g", q[0]) == "c1"
    locks.unlock_batch("g", [q[0]], "c1")
    assert locks.holder("g", q[0]) is None


async def test_held_pull_woken_by_arrival_or_timeout() -> None:
    """A held pull wakes when its queue grows past its offset, and times out otherwise."""
    svc = PullHoldService()
    woken = svc.hold("t", 0, 5, timeout=5)
    other = svc.hold("t", 0, 9, timeout=0.05)
    svc.notify("t", 0, 6)
    assert await woken is True
    assert await other is False
    assert svc.held_count == 0


def test_offsets_persist_and_reload(tmp_path: Path) -> None:
    """Committed offsets are written as standard JSON and read back; the .bak covers a corrupt file."""
    path = tmp_path / "consumerOffset.json"
    m = ConsumerOffsetManager(path)
    m.commit("g", "t", 1, 42)
    assert m.persist_if_dirty() and not m.persist_if_dirty()
    m.commit("g", "t", 1, 43)
    m.persist()
    path.write_text("{oops")
    again = ConsumerOffsetManager(path)
    again.load()
    assert again.query("g", "t", 1) == 42 and again.query("g", "t", 2) == -1


def test_topic_configs_persist_with_system_topics(tmp_path: Path) -> None:
    """Topics survive a reload with their data version; the schedule topic always exists."""
    changed: list[int] = []
    t = TopicConfigManager(tmp_path / "topics.json", delay_levels=18)
    t.load()
    t.on_change = lambda: changed.append(1)
    durable = threading.Event()
    t.upsert(TopicConfig("orders", 4, 4), lambda error: durable.set() if error is None else None)
    assert durable.wait(10), "the writer thread never reported topics.json written"
    t2 = TopicConfigManager(tmp_path / "topics.json")
    t2.load()
    assert t2.get("orders") == TopicConfig("orders", 4, 4) and t2.get("SCHEDULE_TOPIC_XXXX") is not None
    assert changed and t2.data_version["counter"] == t.data_version["counter"]
    assert t.auto_create_for_send("new") is None  # auto-creation is off by default


@pytest.mark.parametrize("name", ["", "a" * 128, "bad topic", "bad/topic"])
def test_illegal_topic_names_refused(name: str) -> None:
    """Empty, too long, or names with other characters are refused."""
    with pytest.raises(InvalidRequestError):
        validate_topic_name(name)


def test_subscription_group_settings_validated(tmp_path: Path) -> None:
    """Group settings coerce types, reject unknown keys, and groups are created on first use."""
    cfg = SubscriptionGroupConfig.from_dict({"groupName": "g", "retryMaxTimes": "3", "consumeEnable": "false"})
    assert cfg.retryMaxTimes == 3 and cfg.consumeEnable is False
    with pytest.raises(InvalidRequestError):
        SubscriptionGroupConfig.from_dict({"groupName": "g", "nope": 1})
    mgr = SubscriptionGroupManager(tmp_path / "sg.json")
    assert mgr.get("new-group").retryMaxTimes == 16
    mgr.flush()  # written in the background; flush waits for it
    again = SubscriptionGroupManager(tmp_path / "sg.json", auto_create=False)
    again.load()
    assert again.get("new-group") is not None and again.get("other") is None


async def test_offsets_periodic_write_runs_off_the_loop_and_only_when_dirty(tmp_path: Path) -> None:
    """The periodic write happens on a worker thread, and only when something was committed."""
    path = tmp_path / "consumerOffset.json"
    m = ConsumerOffsetManager(path)
    assert not await m.persist_in_thread() and not path.exists()
    m.commit("g", "t", 0, 7)
    writers: list[str] = []
    real = m.persist_if_dirty

    def recording() -> bool:
        writers.append(threading.current_thread().name)
        return real()

    m.persist_if_dirty = recording  # type: ignore[method-assign]
    assert await m.persist_in_thread()
    assert writers and writers[0] != threading.main_thread().name
    again = ConsumerOffsetManager(path)
    again.load()
    assert again.query("g", "t", 0) == 7
    assert not await m.persist_in_thread()
