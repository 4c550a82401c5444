"""The HA link's frames, the slave's whole-record cut, and the SYNC_MASTER ack waiters (no sockets)."""

from __future__ import annotations

import asyncio

import pytest

from pymq.broker.ha import codec
from pymq.broker.ha.acks import REPLICATED, AckWaiters, SlaveState
from pymq.broker.ha.epoch_file import EpochEntry as E
from pymq.errors import ProtocolError
from pymq.protocol.record import blank_marker
from pymq.protocol.record_batch import whole_records_prefix
from tests.store.storeutil import keyed, open_store


def test_frames_round_trip_through_a_byte_at_a_time_decoder() -> None:
    hello = codec.Hello(12345, 2, [E(1, 0), E(3, 999)], "127.0.0.1:10911")
    join = codec.Join("truncate", 777, 1 << 30, [E(1, 0), E(4, 500)], "slave holds a tail")
    payload = b"x" * 1000
    stream = (
        codec.encode_hello(hello)
        + codec.encode_join(join)
        + codec.data_header(4096, 9999, len(payload), codec.ACK_NOW)
        + payload
        + codec.data_header(5096, 9999, 0)
        + codec.encode_ack(5096)
    )
    dec = codec.FrameDecoder()
    frames = []
    for i in range(len(stream)):
        frames += dec.feed(stream[i : i + 1])
    assert dec.buffered == 0
    assert [k for k, _ in frames] == [codec.HELLO, codec.JOIN, codec.DATA, codec.DATA, codec.ACK]
    assert codec.decode_hello(frames[0][1]) == hello
    assert codec.decode_join(frames[1][1]) == join
    off, top, flags, data = codec.decode_data(frames[2][1])
    assert (off, top, flags, bytes(data)) == (4096, 9999, codec.ACK_NOW, payload)
    assert codec.decode_data(frames[3][1])[2:] == (0, memoryview(b""))
    assert codec.decode_ack(frames[4][1]) == 5096
    # Several frames in one feed come out together.
    assert len(codec.FrameDecoder().feed(stream)) == 5


def test_decoder_refuses_bad_frames() -> None:
    with pytest.raises(ProtocolError):
        codec.FrameDecoder().feed(b"\x00\x00\x00\x00\x01")  # zero length
    with pytest.raises(ProtocolError):
        codec.FrameDecoder(max_frame=100).feed(b"\x00\x00\x10\x00\x03")
    with pytest.raises(ProtocolError):
        codec.decode_ack(memoryview(b"\x00" * 4))
    with pytest.raises(ProtocolError):
        codec.decode_hello(memoryview(codec.encode_hello(codec.Hello(1, 1, [E(1, 0)], "a"))[5:-3]))
    with pytest.raises(ProtocolError):
        codec.decode_join(memoryview(bytes([9]) + bytes(24)))


def test_whole_records_prefix_cuts_at_records_and_file_ends(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(tmp_path / "s")
    try:
        phys = [store.put("T", 0, keyed(i, size=500))[0].physical_offset for i in range(60)]
        file_size = store.commitlog.file_size
        data = b"".join(bytes(v) for v in store.read_commitlog(0, store.commitlog.max_offset))
    finally:
        store.halt()
    assert len(data) > file_size  # the first file ends with a blank filler
    assert whole_records_prefix(data, 0, file_size) == len(data)
    assert whole_records_prefix(data[: phys[3] + 10], 0, file_size) == phys[3]
    # The filler counts only with the rest of its file.
    assert file_size in phys  # a record starts the second file: the first ends with a filler
    last_in_first = max(p for p in phys if p < file_size)
    end_of_records = last_in_first + int.from_bytes(data[last_in_first : last_in_first + 4], "big")
    assert end_of_records < file_size
    assert whole_records_prefix(data[: file_size - 1], 0, file_size) == end_of_records  # filler incomplete
    assert whole_records_prefix(data[: file_size + 5], 0, file_size) == file_size
    assert whole_records_prefix(blank_marker(16) + bytes(8), file_size - 16, file_size) == 16
    with pytest.raises(ProtocolError):
        whole_records_prefix(b"\x00" * 64, 0, file_size)


async def test_ack_waiters_with_asyncio_futures() -> None:
    w = AckWaiters()
    s = SlaveState("s", 1)
    w.connect(1, s, 0, 0.0)
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    w.add(10, 1.0, fut)
    w.ack(s, 10, 10, 0.5)
    assert await fut == REPLICATED
