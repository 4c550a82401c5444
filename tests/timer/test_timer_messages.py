"""Timer messages (any delay) and merged delay messages on an in-process cluster, real clock, short delays."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from pymq.client import Message, Producer
from pymq.errors import MessageIllegalError
from pymq.protocol.message import Prop
from pymq.testing import LocalCluster
from tests.helpers import read_all, run_admin, wait_until

pytestmark = pytest.mark.integration
_readers = itertools.count()


async def test_timer_messages_arrive_in_time_never_early(tmp_path: Path) -> None:
    """Delays of 1.5 s and 3 s and an absolute time 2 s ahead: each is on its topic within 1 s of its time."""
    async with LocalCluster(tmp_path / "c") as cluster, Producer(cluster.namesrv_addr) as p:
        await cluster.create_topic("timed", 2)
        before = int(time.time() * 1000)
        await p.send_delayed(Message("timed", b"d3000", tags="a"), delay_ms=3000)
        await p.send_delayed(Message("timed", b"d1500", keys="k1"), delay_ms=1500)
        await p.send(Message("timed", b"at2000").set_delivery_time(before + 2000))
        await p.send(Message("timed", b"now"))  # not a timer: stored at once
        after = int(time.time() * 1000)
        assert [m.body for m in await read_all(cluster, "timed", 1, timeout=5)][:1] == [b"now"]
        got = await read_all(cluster, "timed", 4)
        by_body = {m.body: m for m in got}
        assert set(by_body) == {b"now", b"d1500", b"at2000", b"d3000"}
        for body, delay in ((b"d1500", 1500), (b"at2000", 2000), (b"d3000", 3000)):
            m = by_body[body]
            # stored on its real topic no earlier than its time, and within a second of it
            assert before + delay <= m.store_timestamp <= after + delay + 1000, (body, m.store_timestamp - before)
            assert not any(k.startswith("TIMER_") or k in (Prop.REAL_TOPIC, Prop.REAL_QID) for k in m.properties)
        assert by_body[b"d3000"].tags == "a" and by_body[b"d1500"].keys == ["k1"]
        order = sorted((m for m in got if m.body != b"now"), key=lambda m: m.store_timestamp)
        assert [m.body for m in order] == [b"d1500", b"at2000", b"d3000"]
        assert cluster.brokers[0].runtime_info()["timerDelivered"] == 3


async def test_delay_beyond_the_maximum_is_refused_with_a_clear_remark(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", broker={"timer_max_delay_ms": 60_000}) as cluster:
        await cluster.create_topic("timed", 1)
        async with Producer(cluster.namesrv_addr) as p:
            with pytest.raises(MessageIllegalError, match="timer_max_delay_ms"):
                await p.send_delayed(Message("timed", b"too late"), delay_ms=61_000)
            res = await p.send_delayed(Message("timed", b"fine"), delay_ms=59_000)
            assert res.msg_id
            # a batch holding one such message is refused whole
            batch = [Message("timed", b"a"), Message("timed", b"b").set_delay_ms(120_000)]
            with pytest.raises(MessageIllegalError, match="timer_max_delay_ms"):
                await p.send_batch(batch)
        assert cluster.brokers[0].store.max_offset("timed", 0) == 0


async def test_timer_properties_are_ignored_with_timer_enable_off(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", broker={"timer_enable": False}) as cluster:
        await cluster.create_topic("timed", 1)
        async with Producer(cluster.namesrv_addr) as p:
            await p.send_delayed(Message("timed", b"now"), delay_ms=60_000)
        [m] = await read_all(cluster, "timed", 1, timeout=5)
        assert m.body == b"now" and cluster.brokers[0].timer is None


async def test_merged_delay_delivers_once_per_key_and_window_first_body(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c") as cluster, Producer(cluster.namesrv_addr) as p:
        await cluster.create_topic("debounce", 1)
        before = int(time.time() * 1000)
        for i in range(3):
            await p.send(Message("debounce", f"a{i}".encode()).set_merge("user-a", 1500))
        await p.send(Message("debounce", b"b0").set_merge("user-b", 1500))
        got = await read_all(cluster, "debounce", 2)
        assert sorted(m.body for m in got) == [b"a0", b"b0"]
        counts = {m.body: m.properties[Prop.MERGE_COUNT] for m in got}
        assert counts == {b"a0": "3", b"b0": "1"}
        assert all(m.store_timestamp >= before + 1500 for m in got)
        # the window closed with the delivery: the same key starts a new one
        await p.send(Message("debounce", b"a-again").set_merge("user-a", 500))
        got = await read_all(cluster, "debounce", 3)
        assert sorted(m.body for m in got) == [b"a-again", b"a0", b"b0"]
        # nothing else comes (each key once per window)
        assert len(await read_all(cluster, "debounce", 4, timeout=1.5)) == 3


async def test_merged_delay_can_keep_the_last_body(tmp_path: Path) -> None:
    async with (
        LocalCluster(tmp_path / "c", broker={"timer_merge_keep": "last"}) as cluster,
        Producer(cluster.namesrv_addr) as p,
    ):
        await cluster.create_topic("debounce", 1)
        for i in range(4):
            await p.send(Message("debounce", f"v{i}".encode(), tags=f"t{i}").set_merge("k", 1000))
        [m] = await read_all(cluster, "debounce", 1)
        assert (m.body, m.tags, m.properties[Prop.MERGE_COUNT]) == (b"v3", "t3", "4")
        assert len(await read_all(cluster, "debounce", 2, timeout=1.5)) == 1


async def test_admin_sends_timer_and_merged_messages(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", broker={"timer_max_delay_ms": 60_000}) as cluster:
        await cluster.create_topic("timed", 1)
        before = int(time.time() * 1000)
        assert (
            await run_admin(cluster.namesrv_addr, "send", "--topic", "timed", "--body", "later", "--delay-ms", "800")
        )[0] == 0
        at = str(before + 1200)
        assert (await run_admin(cluster.namesrv_addr, "send", "--topic", "timed", "--body", "at", "--deliver-at", at))[
            0
        ] == 0
        for body in ("m1", "m2"):
            args = ("--merge-key", "k", "--merge-window-ms", "5000")  # room for a slow CLI start
            assert (await run_admin(cluster.namesrv_addr, "send", "--topic", "timed", "--body", body, *args))[0] == 0
        code, _, err = await run_admin(
            cluster.namesrv_addr, "send", "--topic", "timed", "--body", "x", "--delay-ms", "61000"
        )
        assert code == 1 and "timer_max_delay_ms" in err
        code, _, err = await run_admin(
            cluster.namesrv_addr, "send", "--topic", "timed", "--body", "x", "--merge-key", "k"
        )
        assert code == 2 and "--merge-window-ms" in err
        got = await read_all(cluster, "timed", 3)
        assert sorted(m.body for m in got) == [b"at", b"later", b"m1"]
        assert all(m.store_timestamp >= before + 500 for m in got)


async def test_pending_timers_are_listed_per_topic(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c") as cluster, Producer(cluster.namesrv_addr) as p:
        await cluster.create_topic("timed", 1)
        await cluster.create_topic("other", 1)
        for _ in range(3):
            await p.send_delayed(Message("timed", b"long"), delay_ms=60_000)
        await p.send_delayed(Message("timed", b"short"), delay_ms=300)
        await p.send(Message("other", b"a").set_merge("k", 60_000))
        await p.send(Message("other", b"b").set_merge("k", 60_000))  # merged: still one pending
        timer = cluster.brokers[0].timer
        assert timer is not None
        await wait_until(lambda: timer.pending_by_topic == {"timed": 3, "other": 1}, what="3 + 1 pending")
        code, out, err = await run_admin(cluster.namesrv_addr, "--json", "timer-list")
        assert code == 0, err
        assert {r["topic"]: r["pending"] for r in json.loads(out)} == {"timed": 3, "other": 1}
        code, out, _ = await run_admin(cluster.namesrv_addr, "timer-list", "--topic", "timed")
        assert code == 0 and out.split()[0::3] == ["timed"] and out.split()[2] == "3"
        assert cluster.brokers[0].runtime_info()["timerPending"] == 4
