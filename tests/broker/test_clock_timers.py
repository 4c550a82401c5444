"""Broker timers driven by pymq.testing.FakeClock: long-polling timeouts and delay-level delivery. No sleeps."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from pymq.broker.delay.service import ScheduleService
from pymq.broker.long_polling import PullHoldService
from pymq.broker.put_order import default_put_hooks
from pymq.broker.put_path import PutPath
from pymq.broker.stats import BrokerStats
from pymq.broker.store import GetStatus, MessageStore
from pymq.broker.topics import TopicConfigManager
from pymq.config import BrokerConfig
from pymq.protocol.message import Prop
from pymq.protocol.record import encode_properties, encode_record
from pymq.protocol.route import TopicConfig
from pymq.testing import FakeClock
from tests.store.storeutil import SMALL, STORE_HOST


async def test_held_pull_times_out_only_when_the_clock_passes_its_suspend_time() -> None:
    clock = FakeClock()
    hold = PullHoldService(clock)
    fut = hold.hold("orders", 0, 5, timeout=30.0)
    await clock.run_for(29.9)
    assert not fut.done() and hold.held_count == 1
    await clock.run_for(0.2)
    assert fut.done() and fut.result() is False
    assert hold.held_count == 0


async def test_arrival_wakes_a_held_pull_and_cancels_its_timer() -> None:
    clock = FakeClock()
    hold = PullHoldService(clock)
    fut = hold.hold("orders", 0, 5, timeout=30.0)
    hold.notify("orders", 0, 5)  # nothing past offset 5 yet: keeps waiting
    assert not fut.done()
    hold.notify("orders", 0, 6)
    assert fut.result() is True
    await asyncio.sleep(0)  # the future's done callbacks run on the loop
    assert clock.sleepers == 0  # the timeout timer went with it


async def test_delayed_message_is_delivered_when_the_clock_reaches_its_level(tmp_path: Path) -> None:
    """Level 3 (10 s): still scheduled after 9.9 s of fake time, on its real topic after 10 s."""
    config = BrokerConfig.model_validate({"store": {"store_dir": str(tmp_path / "store"), **SMALL}})
    store = MessageStore(config.store, store_host=STORE_HOST)
    put_path = PutPath(store, default_put_hooks(config.store.delay_levels_ms))
    store.start()
    topics = TopicConfigManager(tmp_path / "topics.json")
    topics.upsert(TopicConfig("orders", 1, 1))
    props = encode_properties({Prop.DELAY: "3", Prop.TAGS: "late"})
    [res] = put_path.put("orders", 0, encode_record(b"orders", b"hello", props))
    # The fake wall clock starts at the message's store time: due exactly 10 s of fake time later.
    clock = FakeClock(wall_ms=res.store_timestamp)
    host = SimpleNamespace(config=config, store=store, put_path=put_path, topics=topics, stats=BrokerStats())
    schedule = ScheduleService(host, clock)  # type: ignore[arg-type]
    try:
        await schedule.start()
        # The level task finds the message and sleeps on the fake clock until it is due.
        for _ in range(500):
            if clock.sleepers:
                break
            await asyncio.sleep(0.01)
        await clock.run_for(9.9, yields=20)
        assert store.get_messages("g", "orders", 0, 0, 10).status != GetStatus.FOUND
        await clock.run_for((res.store_timestamp + 10_000 - clock.time_ms()) / 1000 + 0.01, yields=20)
        for _ in range(500):
            if schedule.delivered:
                break
            await asyncio.sleep(0.01)
        got = store.get_messages("g", "orders", 0, 0, 10)
        assert got.status == GetStatus.FOUND and got.message_count == 1
        assert schedule.delivered == 1
    finally:
        await schedule.stop()
        store.shutdown()
