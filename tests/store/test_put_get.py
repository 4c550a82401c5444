"""Appending and reading: every PutStatus and GetStatus, batches, limits, reads by offset and by time."""

from __future__ import annotations

import struct
import time
import zlib

import pytest

from pymq.broker.delay.hook import SCHEDULE_TOPIC
from pymq.broker.store import GetStatus, MessageStore, PutStatus
from pymq.broker.store.mapped_file_queue import MappedFileQueue
from pymq.errors import StoreError
from pymq.protocol.record import BODY_POS, FIXED, MAGIC, decode_properties, parse_record, tag_hash
from tests.store.conftest import PutPathFactory, StoreFactory
from tests.store.storeutil import BORN_HOST, bodies, keyed, make_config, read_queue, record, records_of


def raw_record(topic: bytes, body: bytes, props: bytes) -> bytes:
    """A record built without the encoder's checks (to make ones the encoder refuses)."""
    total = FIXED.size + len(body) + 2 + len(topic) + 2 + len(props)
    head = FIXED.pack(total, MAGIC, zlib.crc32(body), 0, 0, 0, BORN_HOST, 0, 0, 0, 0, 0, 0, bytes(8), len(body))
    return head + body + struct.pack(">H", len(topic)) + topic + struct.pack(">H", len(props)) + props


def patched(rec: bytes, offset: int, fmt: str, value: int) -> bytes:
    b = bytearray(rec)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def test_put_ok_assigns_queue_and_commitlog_offsets(store: MessageStore) -> None:
    """PUT_OK results carry consecutive queue offsets per queue, rising commitlog offsets, the store time."""
    first = store.put("T", 0, record(body=b"a") + record(body=b"bb"))
    other = store.put("T", 1, record(body=b"c"))
    more = store.put("T", 0, record(body=b"d"))
    results = first + other + more
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 4
    assert [(r.queue_id, r.queue_offset) for r in results] == [(0, 0), (0, 1), (1, 0), (0, 2)]
    phys = [r.physical_offset for r in results]
    assert phys == sorted(phys) and phys[0] == 0
    assert all(phys[i] + results[i].size == phys[i + 1] for i in range(3))
    assert all(r.topic == "T" and r.reason == "" and r.store_timestamp > 0 for r in results)
    assert store.max_offset("T", 0) == 3 and store.max_offset("T", 1) == 1 and store.queue_ids("T") == [0, 1]


def test_put_with_the_callers_split_answers_like_put_without(store: MessageStore) -> None:
    """put with the put path's split stores as put without one does, and refuses on a full disk."""
    rec = record(body=b"one")
    first = store.put("T", 0, rec, store.split("T", rec))
    second = store.put("T", 0, rec)  # the split made by the store
    assert [(r.status, r.queue_offset) for r in first + second] == [(PutStatus.PUT_OK, 0), (PutStatus.PUT_OK, 1)]
    assert second[0].physical_offset == first[0].physical_offset + len(rec)
    assert [bytes(r.body) for r in read_queue(store, "T", 0)] == [b"one", b"one"]
    store.disk_full = True
    refused = store.put("T", 0, rec, store.split("T", rec))
    assert [r.status for r in refused] == [PutStatus.SERVICE_NOT_AVAILABLE]
    assert store.max_offset("T", 0) == 2


def test_put_batches_mixes_queues_in_one_call(store: MessageStore) -> None:
    """One put_batches call appends to several queues: offsets per queue, one store time, a bad record alone refused."""
    arrivals: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, m: arrivals.append((t, q, m)))
    store.put("A", 0, record("A", b"before"))
    bad = patched(record("B", b"bad"), 4, ">I", 0xDEAD)  # wrong magic: refused, ends its batch
    answers = store.put_batches(
        [("A", 0, record("A", b"a1") + record("A", b"a2")), ("B", 3, record("B", b"b1")), ("A", 1, bad)]
    )
    assert [[r.status for r in rs] for rs in answers] == [
        [PutStatus.PUT_OK, PutStatus.PUT_OK],
        [PutStatus.PUT_OK],
        [PutStatus.MESSAGE_ILLEGAL],
    ]
    assert [r.queue_offset for r in answers[0]] == [1, 2] and answers[1][0].queue_offset == 0
    assert len({r.store_timestamp for r in answers[0] + answers[1]}) == 1
    assert [bytes(r.body) for r in read_queue(store, "A", 0)] == [b"before", b"a1", b"a2"]
    assert [bytes(r.body) for r in read_queue(store, "B", 3)] == [b"b1"]
    assert read_queue(store, "A", 1) == []
    assert sorted(arrivals[1:]) == [("A", 0, 3), ("B", 3, 1)]


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda r: patched(r, 84, ">i", -5), "bad body length"),
        (lambda r: patched(r, 84, ">i", len(r)), "bad body length"),
        (lambda r: patched(r, FIXED.size + 5, ">H", 500), "bad topic length"),
        (lambda r: patched(r, FIXED.size + 5 + 2 + 1, ">H", 3), "record lengths do not add up"),
        (lambda r: r[:-8] + b"\xff" + r[-7:], "body crc mismatch"),
        (lambda r: record("Other", b"hello"), "record topic differs from the request topic"),
        (lambda r: record("T", b"x" * 3000), "message of 3093 bytes exceeds the maximum 2048"),
    ],
)
def test_message_illegal_reasons(new_store: StoreFactory, mutate, reason: str) -> None:  # type: ignore[no-untyped-def]
    """Each validation failure is MESSAGE_ILLEGAL with its own reason; the records around it are stored."""
    store = new_store(max_message_size=2048)
    good = record("T", b"hello")
    assert len(good) == FIXED.size + 5 + 2 + 1 + 2
    bad = mutate(good)
    results = store.put("T", 0, good + bad + good)
    assert [r.status for r in results] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL, PutStatus.PUT_OK]
    assert results[1].reason == reason and results[1].queue_offset == -1
    assert [r.queue_offset for r in (results[0], results[2])] == [0, 1]
    assert bodies(store.get_messages("g", "T", 0, 0)) == [b"hello", b"hello"]


def test_bad_header_or_truncated_tail_ends_the_batch(store: MessageStore) -> None:
    """A record whose header cannot be trusted, or a truncated tail, is rejected and ends the batch."""
    good = record("T", b"hello")
    bad_magic = patched(good, 4, ">I", 0x12345678)
    res = store.put("T", 0, good + bad_magic + good)
    assert [r.status for r in res] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL]
    assert res[1].reason == f"bad record header at byte {len(good)} of the batch"
    oversize = patched(good, 0, ">i", len(good) + 1)
    res = store.put("T", 0, good + oversize)
    assert [r.status for r in res] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL]
    res = store.put("T", 0, good + good[:50])
    assert res[1].reason == f"truncated record at byte {len(good)} of the batch"
    assert store.max_offset("T", 0) == 3


def test_message_larger_than_a_commitlog_file_is_illegal(store: MessageStore) -> None:
    """A record that cannot fit in one commitlog file (with its blank marker) is refused, not split."""
    limit = store.config.commitlog_file_size - 8
    res = store.put("T", 0, record("T", b"z" * limit))
    assert res[0].status == PutStatus.MESSAGE_ILLEGAL and str(limit) in res[0].reason


def test_properties_size_exceeded(new_store: StoreFactory) -> None:
    """Properties over 32767 bytes are PROPERTIES_SIZE_EXCEEDED; a neighbour in the batch is stored."""
    store = new_store(commitlog_file_size=256 * 1024)
    big = raw_record(b"T", b"body", b"BIG\x01" + b"v" * 40000 + b"\x02")
    res = store.put("T", 0, big + record("T", b"ok"))
    assert [r.status for r in res] == [PutStatus.PROPERTIES_SIZE_EXCEEDED, PutStatus.PUT_OK]
    assert "40005" in res[0].reason and res[1].queue_offset == 0


def test_service_not_available_when_not_running(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Before start and after shutdown every record of a batch is SERVICE_NOT_AVAILABLE."""
    store = MessageStore(make_config(tmp_path / "s"))
    res = store.put("T", 0, record() + record())
    assert [r.status for r in res] == [PutStatus.SERVICE_NOT_AVAILABLE] * 2
    assert res[0].reason == "store is not running"
    store.start()
    assert store.put("T", 0, record())[0].status == PutStatus.PUT_OK
    store.shutdown()
    assert [r.status for r in store.put("T", 0, record() * 3)] == [PutStatus.SERVICE_NOT_AVAILABLE] * 3


def test_service_not_available_when_disk_full(new_store: StoreFactory) -> None:
    """Once a cleanup pass finds the (simulated) disk over 90 % full, records are SERVICE_NOT_AVAILABLE."""
    store = new_store(disk_clean_forcibly_ratio=1.0)  # nothing may be deleted to make room
    store.put("T", 0, b"".join(record(body=b"x" * 2000) for i in range(20)))
    store.config.simulated_disk_capacity = int(store.disk_bytes() / 0.95)
    assert store.run_cleanup().deleted_commitlog_files == 0 and store.disk_full
    res = store.put("T", 0, record() + record())
    assert [r.status for r in res] == [PutStatus.SERVICE_NOT_AVAILABLE] * 2
    assert res[0].reason == "disk full: writes refused until cleanup"


@pytest.mark.parametrize("failing", ["commitlog", "consumequeue"])
def test_file_creation_failure_undoes_the_batch(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """If a commitlog or consume-queue file cannot be created mid-batch, the whole batch is undone."""
    store.put("T", 0, record("T", b"before"))
    original = MappedFileQueue.create_file

    def refuse(self: MappedFileQueue, start: int):  # type: ignore[no-untyped-def]
        if failing in str(self.directory):
            raise StoreError("cannot allocate: No space left on device")
        return original(self, start)

    store.services.warmer.stop()  # type: ignore[union-attr]  # and no preallocated next file
    if store.commitlog.mfq.next_file is not None:
        store.commitlog.mfq.next_file.destroy()
        store.commitlog.mfq.next_file = None
    end_before = store.commitlog.max_offset
    monkeypatch.setattr(MappedFileQueue, "create_file", refuse)
    batch = b"".join(record("T", bytes([i]) * 1500) for i in range(20))  # crosses files of both kinds
    res = store.put("T", 0, batch)
    assert [r.status for r in res] == [PutStatus.CREATE_MAPPED_FILE_FAILED] * 20
    assert "No space" in res[0].reason
    assert store.commitlog.max_offset == end_before and store.max_offset("T", 0) == 1
    monkeypatch.undo()
    after = store.put("T", 0, record("T", b"after"))[0]
    assert after.queue_offset == 1 and after.physical_offset == end_before
    assert [bytes(r.body) for r in read_queue(store, "T", 0)] == [b"before", b"after"]


def test_file_creation_failure_undoes_a_split_batch_too(
    new_put_path: PutPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch the put hooks split into pieces (delayed records) is undone as a whole, as one batch is."""
    path = new_put_path()
    store = path.store
    store.put("T", 0, record("T", b"before"))
    original = MappedFileQueue.create_file

    def refuse(self: MappedFileQueue, start: int):  # type: ignore[no-untyped-def]
        if "commitlog" in str(self.directory):
            raise StoreError("cannot allocate: No space left on device")
        return original(self, start)

    store.services.warmer.stop()  # type: ignore[union-attr]  # and no preallocated next file
    if store.commitlog.mfq.next_file is not None:
        store.commitlog.mfq.next_file.destroy()
        store.commitlog.mfq.next_file = None
    end_before = store.commitlog.max_offset
    monkeypatch.setattr(MappedFileQueue, "create_file", refuse)
    # plain, delayed, then enough to cross into a new commitlog file (which fails)
    batch = record("T", b"a") + record("T", b"later", delay=1) + b"".join(record("T", b"x" * 1500) for _ in range(20))
    res = path.put("T", 0, batch)
    assert [r.status for r in res] == [PutStatus.CREATE_MAPPED_FILE_FAILED] * 22
    assert store.commitlog.max_offset == end_before and store.max_offset("T", 0) == 1
    assert store.max_offset(SCHEDULE_TOPIC, 0) == 0
    monkeypatch.undo()
    after = path.put("T", 0, record("T", b"after") + record("T", b"later", delay=1))
    assert [(r.topic, r.queue_offset) for r in after] == [("T", 1), (SCHEDULE_TOPIC, 0)]
    assert after[0].physical_offset == end_before


def test_get_statuses(store: MessageStore) -> None:
    """FOUND, OFFSET_OVERFLOW_ONE, OFFSET_OVERFLOW_BADLY, NO_MATCHED_LOGIC_QUEUE and their next offsets."""
    store.put("T", 0, b"".join(record(body=f"m{i}".encode()) for i in range(5)))
    r = store.get_messages("g", "T", 0, 2, 32)
    assert (r.status, r.message_count, r.next_begin_offset, r.min_offset, r.max_offset) == (
        GetStatus.FOUND,
        3,
        5,
        0,
        5,
    )
    assert bodies(r) == [b"m2", b"m3", b"m4"] and r.total_size == sum(len(b) for b in r.buffers)
    r = store.get_messages("g", "T", 0, 5)
    assert (r.status, r.next_begin_offset, r.message_count) == (GetStatus.OFFSET_OVERFLOW_ONE, 5, 0)
    r = store.get_messages("g", "T", 0, 9)
    assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)
    r = store.get_messages("g", "Nope", 0, 0)
    assert r.status == GetStatus.NO_MATCHED_LOGIC_QUEUE


def test_no_message_in_queue(store: MessageStore) -> None:
    """A queue that exists but holds nothing (e.g. only refused records were sent to it): NO_MESSAGE_IN_QUEUE.

    (Delayed messages no longer create their request's queue: the broker's put path sends
    them to the schedule topic before the store sees them. Pulls answer both cases alike.)
    """
    assert store.put("T", 4, record("U", b"other topic"))[0].status == PutStatus.MESSAGE_ILLEGAL
    r = store.get_messages("g", "T", 4, 0)
    assert (r.status, r.next_begin_offset, r.max_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0)


def test_tag_filter_and_no_matched_message(store: MessageStore) -> None:
    """Filtering by tag code returns only matching records; when none match: NO_MATCHED_MESSAGE."""
    store.put("T", 0, b"".join(keyed(i) for i in range(10)))  # odd: tag A, even: tag B
    r = store.get_messages("g", "T", 0, 0, 32, tag_codes={tag_hash("A")})
    assert r.status == GetStatus.FOUND and [rec.queue_offset for rec in records_of(r)] == [1, 3, 5, 7, 9]
    r = store.get_messages("g", "T", 0, 0, 32, tag_codes=frozenset({tag_hash("Z")}))
    assert (r.status, r.message_count, r.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 0, 10)


def test_max_count_and_max_bytes(store: MessageStore) -> None:
    """max_count caps the records; max_bytes caps the bytes but one record is always returned."""
    recs = [record(body=bytes([65 + i]) * 100) for i in range(10)]
    store.put("T", 0, b"".join(recs))
    r = store.get_messages("g", "T", 0, 0, 4)
    assert r.message_count == 4 and r.next_begin_offset == 4
    r = store.get_messages("g", "T", 0, 0, 32, max_bytes=len(recs[0]) * 3 + 10)
    assert r.message_count == 3 and r.next_begin_offset == 3
    r = store.get_messages("g", "T", 0, 0, 32, max_bytes=10)
    assert r.message_count == 1 and r.total_size == len(recs[0])


def test_adjacent_records_come_back_as_one_buffer(store: MessageStore) -> None:
    """Records adjacent in the commitlog come back as one zero-copy slice; interleaved queues split them."""
    store.put("T", 0, record(body=b"a") + record(body=b"b"))
    store.put("T", 1, record(body=b"x"))
    store.put("T", 0, record(body=b"c"))
    r = store.get_messages("g", "T", 0, 0)
    assert len(r.buffers) == 2 and r.message_count == 3 and bodies(r) == [b"a", b"b", b"c"]
    assert all(isinstance(b, memoryview) for b in r.buffers)
    assert r.max_physical_offset_read == store.commitlog.max_offset


def test_read_record_by_physical_offset(store: MessageStore) -> None:
    """read_record returns the record at a commitlog offset, nothing for offsets inside or past records."""
    res = store.put("T", 0, record(body=b"one") + record(body=b"two"))
    rec = store.read_record(res[1].physical_offset)
    assert rec is not None and bytes(parse_record(rec, check_crc=True).body) == b"two"
    assert store.read_record(res[1].physical_offset + 4) is None
    assert store.read_record(res[1].physical_offset + res[1].size) is None
    assert store.read_record(-20) is None and store.read_record(10**12) is None


def test_offset_by_time_and_store_time_at(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """offset_by_time finds the first queue offset stored at or after a time; store times never go back."""
    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    for t in (1000.0, 1002.0, 1002.0, 1005.0, 1003.0, 1009.0):  # 1003 < 1005: the clock went back
        clock[0] = t
        store.put("T", 0, record())
    monkeypatch.undo()
    times = [store.store_time_at("T", 0, i) for i in range(6)]
    assert times == [1_000_000, 1_002_000, 1_002_000, 1_005_000, 1_005_000, 1_009_000]
    assert store.offset_by_time("T", 0, 0) == 0
    assert store.offset_by_time("T", 0, 1_002_000) == 1
    assert store.offset_by_time("T", 0, 1_002_001) == 3
    assert store.offset_by_time("T", 0, 1_006_000) == 5
    assert store.offset_by_time("T", 0, 2_000_000) == 6
    assert store.offset_by_time("Nope", 0, 0) == 0 and store.store_time_at("T", 0, 99) == 0


def test_delayed_message_goes_to_the_schedule_topic(new_put_path: PutPathFactory) -> None:
    """DELAY=L stores into SCHEDULE_TOPIC_XXXX queue L-1 with REAL_TOPIC/REAL_QID; tags code = due time.

    The broker's put path does it (its delay hook); the store only stores what it is given.
    """
    path = new_put_path()
    store = path.store
    events: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, m: events.append((t, q, m)))
    rec = record("T", b"later", tags="tg", uniq="D1", delay=3, props={"user": "v"})
    res = path.put("T", 1, record("T", b"now") + rec)
    assert [(r.topic, r.queue_id, r.queue_offset) for r in res] == [("T", 1, 0), (SCHEDULE_TOPIC, 2, 0)]
    assert sorted(events) == [(SCHEDULE_TOPIC, 2, 1), ("T", 1, 1)]
    got = records_of(store.get_messages("g", SCHEDULE_TOPIC, 2, 0))
    assert len(got) == 1 and bytes(got[0].body) == b"later" and got[0].topic == SCHEDULE_TOPIC.encode()
    props = decode_properties(got[0].properties)
    assert props["REAL_TOPIC"] == "T" and props["REAL_QID"] == "1" and props["DELAY"] == "3"
    assert props["user"] == "v" and props["TAGS"] == "tg" and got[0].born_host == BORN_HOST
    entry = store.queues[(SCHEDULE_TOPIC, 2)].entry(0)
    assert entry == (res[1].physical_offset, res[1].size, res[1].store_timestamp + 10_000)
    assert len(store.query_by_key(SCHEDULE_TOPIC, "D1")) == 1


def test_delay_level_is_clamped_and_bad_levels_store_normally(new_put_path: PutPathFactory) -> None:
    """A level above the table uses the last level; a non-numeric level stores the message on its topic."""
    path = new_put_path()
    res = path.put("T", 0, record("T", b"far", delay=99))
    assert (res[0].topic, res[0].queue_id) == (SCHEDULE_TOPIC, 17)
    odd = record("T", b"odd", props={"DELAY": "soon"})
    assert path.put("T", 0, odd)[0].topic == "T"


def test_delayed_records_keep_their_place_among_the_batch_results(new_put_path: PutPathFactory) -> None:
    """A batch mixing delayed, plain and refused records: one result per record, in batch order."""
    path = new_put_path()
    bad = bytearray(record("T", b"bad", delay=1))
    bad[BODY_POS] ^= 0xFF  # a body byte: the CRC no longer matches
    batch = (
        record("T", b"a") + record("T", b"d1", delay=1) + record("T", b"b") + bytes(bad) + record("T", b"d2", delay=2)
    )
    res = path.put("T", 0, batch)
    assert [(r.status, r.topic, r.queue_id) for r in res] == [
        (PutStatus.PUT_OK, "T", 0),
        (PutStatus.PUT_OK, SCHEDULE_TOPIC, 0),
        (PutStatus.PUT_OK, "T", 0),
        (PutStatus.MESSAGE_ILLEGAL, "", -1),
        (PutStatus.PUT_OK, SCHEDULE_TOPIC, 1),
    ]
    assert [r.queue_offset for r in res if r.topic == "T"] == [0, 1]
    assert bodies(path.store.get_messages("g", "T", 0, 0)) == [b"a", b"b"]


def test_the_store_alone_knows_no_delays(store: MessageStore) -> None:
    """Without the broker's put path a DELAY property is just a property: the record stays on its topic."""
    res = store.put("T", 0, record("T", b"x", delay=2))
    assert (res[0].status, res[0].topic, res[0].queue_id) == (PutStatus.PUT_OK, "T", 0)
    assert store.queues[("T", 0)].entry(0)[2] == 0


def test_delete_topic_removes_its_queues(store: MessageStore) -> None:
    """delete_topic drops the consume queues and their files; other topics stay."""
    store.put("T", 0, record())
    store.put("U", 0, record("U"))
    store.delete_topic("T")
    assert store.get_messages("g", "T", 0, 0).status == GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert not (store.root / "consumequeue" / "T").exists()
    assert store.get_messages("g", "U", 0, 0).message_count == 1
