"""Arrival listeners: every topic or a topic filter asked once per topic, with each queue's end after a put."""

from __future__ import annotations

import struct

from pymq.broker.store import MessageStore, PutStatus
from pymq.broker.store.arrivals import ArrivalListeners
from tests.store.storeutil import record

Arrival = tuple[str, int, int]


def test_a_filtered_listener_hears_only_its_topics_and_its_filter_is_asked_once_per_topic(
    store: MessageStore,
) -> None:
    """Single puts and multi-batch puts call each queue's topic listeners with the queue's end."""
    every: list[Arrival] = []
    wanted: list[Arrival] = []
    asked: list[str] = []

    def wants(topic: str) -> bool:
        asked.append(topic)
        return topic.startswith("sys_")

    store.add_arrival_listener(lambda t, q, m: every.append((t, q, m)))
    store.add_arrival_listener(lambda t, q, m: wanted.append((t, q, m)), wants)
    store.put("T", 0, record("T", b"a"))
    store.put("sys_x", 2, record("sys_x", b"b") + record("sys_x", b"c"))
    store.put("T", 0, record("T", b"d"))
    store.put_batches([("sys_x", 2, record("sys_x", b"e")), ("T", 1, record("T", b"f"))])
    store.put("sys_x", 2, record("sys_x", b"g"))
    assert every[:3] == [("T", 0, 1), ("sys_x", 2, 2), ("T", 0, 2)]
    assert sorted(every[3:5]) == [("T", 1, 1), ("sys_x", 2, 3)] and every[5:] == [("sys_x", 2, 4)]
    assert wanted == [("sys_x", 2, 2), ("sys_x", 2, 3), ("sys_x", 2, 4)]
    assert sorted(asked) == ["T", "sys_x"]


def test_the_end_of_a_put_with_a_refused_record_is_the_queue_end(store: MessageStore) -> None:
    """A batch whose bad record is refused reports the end of what was stored; nothing stored, no call."""
    arrivals: list[Arrival] = []
    store.add_arrival_listener(lambda t, q, m: arrivals.append((t, q, m)))
    bad = bytearray(record("T", b"bad"))
    struct.pack_into(">I", bad, 4, 0xDEAD)  # wrong magic
    results = store.put("T", 0, record("T", b"ok") + bytes(bad))
    assert [r.status for r in results] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL]
    store.put("T", 0, bytes(bad))
    assert arrivals == [("T", 0, 1)] and store.max_offset("T", 0) == 1


def test_listeners_added_or_removed_later_are_seen_by_topics_already_resolved(store: MessageStore) -> None:
    heard: list[str] = []

    def first(t: str, q: int, m: int) -> None:
        heard.append("first")

    def second(t: str, q: int, m: int) -> None:
        heard.append("second")

    store.add_arrival_listener(first)
    store.put("T", 0, record("T"))
    store.add_arrival_listener(second, "T".__eq__)
    store.add_arrival_listener(second, "other".__eq__)
    store.put("T", 0, record("T"))
    store.remove_arrival_listener(first)
    store.remove_arrival_listener(second)  # its first registration ("T") only
    store.put("T", 0, record("T"))
    store.put("other", 0, record("other"))
    assert heard == ["first", "first", "second", "second"]
    assert store.arrivals.listeners == [second]
    store.remove_arrival_listener(first)  # not registered: nothing happens
    assert store.arrivals.listeners == [second]


def test_a_deleted_topic_leaves_no_cached_entry(store: MessageStore) -> None:
    store.add_arrival_listener(lambda t, q, m: None, "T".__eq__)
    store.put("T", 0, record("T"))
    assert "T" in store.arrivals.by_topic
    store.delete_topic("T")
    assert "T" not in store.arrivals.by_topic


def test_a_registration_during_a_resolution_never_leaves_a_stale_answer_cached() -> None:
    """A filter that registers a listener while being asked: its answer lands in the dropped cache."""
    arrivals = ArrivalListeners()

    def early(t: str, q: int, m: int) -> None:
        pass

    def late(t: str, q: int, m: int) -> None:
        pass

    def wants(topic: str) -> bool:
        if late not in arrivals.listeners:
            arrivals.add(late)
        return True

    arrivals.add(early, wants)
    assert arrivals.of_topic("T") == (early,)  # asked before late came
    assert arrivals.by_topic == {}
    assert arrivals.of_topic("T") == (early, late) and arrivals.by_topic == {"T": (early, late)}
