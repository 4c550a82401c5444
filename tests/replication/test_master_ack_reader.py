"""The master reads a slave's ACKs as they arrive (the HA link's protocol, no reader task).

A bare slave on 127.0.0.1 joins a real SYNC_MASTER: its ACK moves the offset the master
reports for it, several ACKs in one read count as the highest, and a frame that is not an
ACK ends that link (closed by the master) while the master keeps serving the next slave.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pymq.broker.app import BrokerApp
from pymq.broker.ha import codec
from pymq.config import BrokerRole
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration


async def _join(ha: str, address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """Connect as a slave holding nothing; answers the JOIN offset."""
    host, _, port = ha.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(codec.encode_hello(codec.Hello(0, 1, [], address)))
    decoder = codec.FrameDecoder()
    while True:
        chunk = await asyncio.wait_for(reader.read(65536), 5)
        assert chunk, "the master closed the link before JOIN"
        for kind, body in decoder.feed(chunk):
            assert kind == codec.JOIN
            join = codec.decode_join(body)
            assert join.action == "stream", join.reason
            return reader, writer, join.offset


async def _acked(master: BrokerApp, address: str, offset: int) -> None:
    assert master.replication is not None and master.replication.master is not None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        offsets = [s["ackOffset"] for s in master.replication.master.slave_info() if s["address"] == address]
        if offsets and offsets[0] == offset:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the master never saw {address} at {offset}: {master.replication.master.slave_info()}")


async def _closed_by_master(reader: asyncio.StreamReader) -> bool:
    """True when the master closes the link (heartbeats may come first)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if not await asyncio.wait_for(reader.read(65536), 1):
                return True
        except ConnectionError:
            return True
        except TimeoutError:
            continue
    return False


async def test_acks_are_read_as_they_arrive_and_a_bad_frame_ends_only_its_link(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path, brokers=0) as cluster:
        master = await cluster.add_broker(role=BrokerRole.SYNC_MASTER.value, ha_heartbeat_seconds=0.2)
        assert master.replication is not None
        ha = master.replication.ha_address()

        reader, writer, offset = await _join(ha, "127.0.0.1:1")
        try:
            writer.write(codec.encode_ack(offset + 100))
            await _acked(master, "127.0.0.1:1", offset + 100)
            # several ACKs in one read: the highest counts
            writer.write(codec.encode_ack(offset + 300) + codec.encode_ack(offset + 200))
            await _acked(master, "127.0.0.1:1", offset + 300)
            # a frame a slave never sends after HELLO: the master drops this link
            writer.write(codec.encode_hello(codec.Hello(0, 1, [], "127.0.0.1:1")))
            assert await _closed_by_master(reader), "the master kept a link that sent a HELLO after JOIN"
        finally:
            writer.close()

        # the master still serves: the next slave joins and its ACK counts
        _reader2, writer2, offset2 = await _join(ha, "127.0.0.1:2")
        try:
            writer2.write(codec.encode_ack(offset2 + 50))
            await _acked(master, "127.0.0.1:2", offset2 + 50)
        finally:
            writer2.close()
