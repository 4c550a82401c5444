"""A pull of a cold backlog (far behind the commitlog end, not mapped recently) is answered after its
pages were brought in on a worker thread (store/residency.py), with the same messages."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pymq.broker.store import residency
from pymq.client import ConsumeFromWhere, MessageQueue, PullConsumer
from pymq.protocol.record import encode_record, pack_host
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration


async def test_a_cold_backlog_is_pulled_whole_and_in_order(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", brokers=1) as cluster:
        await cluster.create_topic("cold", 1)
        app = cluster.brokers[0]
        store = app.store
        assert store is not None
        host = pack_host("10.0.0.1", 1)
        count = 0
        while store.commitlog.max_offset < residency.COLD_LAG + 4 * (1 << 20):  # ~12 MiB, 1 KiB bodies
            body = [b"%08d" % (count + i) + bytes(1016) for i in range(64)]
            store.put("cold", 0, b"".join(encode_record(b"cold", b, b"", born_host=host) for b in body))
            count += 64
        c = PullConsumer(cluster.namesrv_addr, "cold-g", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.assign([MessageQueue("cold", app.config.broker_name, 0)])
        got: list[int] = []
        async with c:
            deadline = time.monotonic() + 60
            while len(got) < count and time.monotonic() < deadline:
                got += [int(m.body[:8]) for m in await c.poll(timeout=2.0)]
        assert got == list(range(count))
        if store.residency.available:  # (Linux >= 5.14)
            assert store.residency.prefaulted > 0
