"""A slave drops a master that goes silent after JOIN (no data, no heartbeat) and connects again.

The master here is a bare HA listener on 127.0.0.1 that answers HELLO with JOIN and then says
nothing: the slave must give up on it after 3 heartbeats + 5 s (its one silence timeout is
pushed back at most once a second, so up to a second earlier), not wait for ever.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pymq.broker.ha import codec
from pymq.config import BrokerRole
from pymq.testing import LocalCluster

HEARTBEAT = 0.1
SILENT = HEARTBEAT * 3 + 5.0

pytestmark = pytest.mark.integration


async def test_a_slave_leaves_a_master_silent_after_join_and_joins_again(tmp_path: Path) -> None:
    file_size: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    joined: list[float] = []
    closed: list[float] = []

    async def silent_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = codec.FrameDecoder()
        hello = None
        while hello is None:
            chunk = await reader.read(65536)
            if not chunk:
                return
            for kind, body in decoder.feed(chunk):
                if kind == codec.HELLO:
                    hello = codec.decode_hello(body)
        writer.write(codec.encode_join(codec.Join("stream", hello.max_offset, await file_size, [], "")))
        joined.append(time.monotonic())
        while await reader.read(65536):  # the slave's ACKs; no DATA, no heartbeat goes back
            pass
        closed.append(time.monotonic())
        writer.close()

    server = await asyncio.start_server(silent_master, "127.0.0.1", 0)
    ha = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with LocalCluster(tmp_path, brokers=0) as cluster:
            slave = await cluster.add_broker(
                broker_id=1,
                role=BrokerRole.SLAVE.value,
                master_addr="127.0.0.1:9",
                ha_master_addr=ha,
                ha_heartbeat_seconds=HEARTBEAT,
            )
            file_size.set_result(slave.store.commitlog_file_size)
            deadline = time.monotonic() + SILENT + 10
            while len(joined) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert closed, "the slave never left its silent master"
            waited = closed[0] - joined[0]
            assert SILENT - 1.5 <= waited <= SILENT + 1.5, f"left after {waited:.2f}s, expected ~{SILENT}s"
            assert len(joined) == 2, "the slave did not connect again"
    finally:
        server.close()
        await server.wait_closed()
