"""The timer service on a FakeClock: +2 s, +5 s and +1 h fire in order, never early, across a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from pymq.broker.put_order import default_put_hooks
from pymq.broker.put_path import PutPath
from pymq.broker.stats import BrokerStats
from pymq.broker.store import GetStatus, MessageStore
from pymq.broker.store.results import PutStatus
from pymq.broker.timer.hook import TIMER_TOPIC
from pymq.broker.timer.service import TimerService
from pymq.broker.topics import TopicConfigManager
from pymq.config import BrokerConfig
from pymq.protocol.message import Prop, iter_messages
from pymq.protocol.record import encode_properties, encode_record
from pymq.protocol.route import TopicConfig
from pymq.testing import FakeClock
from tests.helpers import wait_until
from tests.store.storeutil import SMALL, STORE_HOST


def delivered_bodies(store: MessageStore) -> list[bytes]:
    got = store.get_messages("g", "orders", 0, 0, 100)
    if got.status != GetStatus.FOUND:
        return []
    return [m.body for buf in got.buffers for m in iter_messages(buf)]


async def settle() -> None:
    """Give the service's tasks real loop time (nothing may happen: the fake clock stands still)."""
    await asyncio.sleep(0.2)


async def test_timers_fire_in_order_at_their_time_on_a_fake_clock_across_a_restart(tmp_path: Path) -> None:
    config = BrokerConfig.model_validate({"store": {"store_dir": str(tmp_path / "store"), **SMALL}})
    clock = FakeClock(wall_ms=1_700_000_000_000)
    store = MessageStore(config.store, store_host=STORE_HOST)
    topics = TopicConfigManager(tmp_path / "topics.json")
    topics.upsert(TopicConfig("orders", 1, 1))
    host = SimpleNamespace(config=config, store=store, topics=topics, stats=BrokerStats(), put_path=None)
    timer = TimerService(host, clock)  # type: ignore[arg-type]
    host.put_path = PutPath(store, [timer.hook, *default_put_hooks(config.store.delay_levels_ms)])
    store.start()
    try:
        for body, delay in ((b"hour", 3_600_000), (b"five", 5000), (b"two", 2000)):
            props = encode_properties({Prop.TIMER_DELAY_MS: str(delay)})
            [res] = host.put_path.put("orders", 0, encode_record(b"orders", body, props))
            assert res.status == PutStatus.PUT_OK and res.topic == TIMER_TOPIC
        await timer.start()
        await wait_until(lambda: timer.enqueued == 3, what="3 timers filed")

        await clock.run_for(1.999)
        await settle()
        assert delivered_bodies(store) == []
        await clock.run_for(0.001)
        await wait_until(lambda: delivered_bodies(store) == [b"two"], what="+2 s")
        await clock.run_for(2.999)
        await settle()
        assert delivered_bodies(store) == [b"two"]
        await clock.run_for(0.001)
        await wait_until(lambda: delivered_bodies(store) == [b"two", b"five"], what="+5 s")

        # A restart in between: the hour timer is still pending, from the files and the checkpoint.
        await timer.stop()
        timer = TimerService(host, clock)  # type: ignore[arg-type]
        await timer.start()
        await clock.run_for(3595 - 0.001)
        await wait_until(lambda: timer.cursor_ms >= clock.time_ms() - 1000, what="catch up over empty slots")
        await settle()
        assert delivered_bodies(store) == [b"two", b"five"]
        await clock.run_for(0.001)
        await wait_until(lambda: delivered_bodies(store) == [b"two", b"five", b"hour"], what="+1 h")
        assert timer.enqueued == 0  # filed once, before the restart
    finally:
        await timer.stop()
        store.shutdown()


async def test_merge_index_survives_a_restart(tmp_path: Path) -> None:
    """A window opened before a restart keeps collecting merges after it and fires once, at the first's time."""
    config = BrokerConfig.model_validate({"store": {"store_dir": str(tmp_path / "store"), **SMALL}})
    clock = FakeClock(wall_ms=1_700_000_000_000)
    store = MessageStore(config.store, store_host=STORE_HOST)
    topics = TopicConfigManager(tmp_path / "topics.json")
    topics.upsert(TopicConfig("orders", 1, 1))
    host = SimpleNamespace(config=config, store=store, topics=topics, stats=BrokerStats(), put_path=None)
    timer = TimerService(host, clock)  # type: ignore[arg-type]
    host.put_path = PutPath(store, [timer.hook])
    store.start()

    def send(body: bytes) -> None:
        props = encode_properties({Prop.MERGE_KEY: "cart-1", Prop.MERGE_WINDOW_MS: "10000"})
        [res] = host.put_path.put("orders", 0, encode_record(b"orders", body, props))
        assert res.status == PutStatus.PUT_OK

    try:
        await timer.start()
        send(b"first")
        send(b"second")
        await wait_until(lambda: timer.merge and next(iter(timer.merge.values()))[3] == 2, what="2 merged")
        await clock.run_for(4)
        await timer.stop()
        timer = TimerService(host, clock)  # type: ignore[arg-type]
        host.put_path = PutPath(store, [timer.hook])
        await timer.start()
        assert [v[3] for v in timer.merge.values()] == [2]
        send(b"third")
        await wait_until(lambda: next(iter(timer.merge.values()))[3] == 3, what="3 merged")
        await clock.run_for(5.999)
        await settle()
        assert delivered_bodies(store) == []
        await clock.run_for(0.001)
        await wait_until(lambda: delivered_bodies(store) == [b"first"], what="one delivery at first + 10 s")
        got = store.get_messages("g", "orders", 0, 0, 10)
        [m] = [m for buf in got.buffers for m in iter_messages(buf)]
        assert m.properties[Prop.MERGE_COUNT] == "3" and timer.merge == {}
    finally:
        await timer.stop()
        store.shutdown()
