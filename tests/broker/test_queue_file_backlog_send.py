"""A producer's view of a store that cannot make consume-queue files: SERVICE_NOT_AVAILABLE naming the
cause (as on a full disk), then sends succeed again once files can be made."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from pymq.client import Message, Producer
from pymq.errors import ServiceNotAvailableError
from pymq.protocol.route import MessageQueue
from pymq.testing import LocalCluster
from tests.helpers import wait_until_async

pytestmark = pytest.mark.integration


async def test_send_refused_while_queue_files_cannot_be_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with LocalCluster(tmp_path / "c", store={"consume_queue_max_pending_files": 2}) as cluster:
        await cluster.create_topic("t", 8)
        broker = cluster.brokers[0]
        store = broker.store
        assert store is not None
        if store.map_pool.maker is None:  # (off Linux queue files are made at once, on the writer)
            return
        failing = True
        real_open = os.open

        def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if failing and flags & os.O_CREAT and f"consumequeue{os.sep}t{os.sep}" in str(path):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", fake_open)
        sent: list[int] = []
        async with Producer(cluster.namesrv_addr, "p") as producer:
            with pytest.raises(ServiceNotAvailableError) as refused:
                for q in range(8):  # each send to a new queue queues one more file that cannot be made
                    await producer.send(Message("t", b"m%d" % q), queue=MessageQueue("t", broker.config.broker_name, q))
                    sent.append(q)
            assert 3 <= len(sent) < 8
            assert "consume-queue files not made" in refused.value.remark
            failing = False

            async def caught_up() -> bool:
                return store.refused is None

            await wait_until_async(caught_up, timeout=30, what="the file maker catching up")
            result = await producer.send(Message("t", b"after"), queue=MessageQueue("t", broker.config.broker_name, 0))
            assert result.queue_offset == 1
        assert [store.max_offset("t", q) for q in sent] == [1 if q else 2 for q in sent]
