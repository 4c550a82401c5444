"""A slave's dispatch of replicated records: the accelerator's ``dispatch_scan`` against ``scan_stored_py``.

``Dispatcher.scan_stored`` turns a file's stored records into consume-queue runs and index
entries; the C copy must give exactly what the Python reference gives, and hand back to it
(NotImplemented) whatever it does not handle: a topic not learnt yet, a topic with its own tags
rule (the delay hook's schedule topic), malformed record tuples.
"""

from __future__ import annotations

import pytest

from pymq.broker.delay.hook import SCHEDULE_TOPIC
from pymq.broker.store import MessageStore
from pymq.protocol import record
from pymq.protocol.record_batch import stored_scan_py
from tests.store.conftest import PutPathFactory
from tests.store.storeutil import keyed, put_mixed
from tests.store.storeutil import record as make_record

pytestmark = pytest.mark.skipif(
    getattr(record.speedups, "dispatch_scan", None) is None, reason="the C accelerator is not built"
)


def file_records(store: MessageStore) -> list[tuple[object, int, list[tuple[int, int, int, int, int, int, int]]]]:
    """Each commitlog file's mapping, its physical start and its stored records."""
    out = []
    for mf in store.commitlog.mfq.files:
        records, _, _ = stored_scan_py(mf.mm, 0, mf.wrote_pos, mf.file_from, True, 1 << 20)
        out.append((mf.mm, mf.file_from, records))
    return out


def test_the_accelerator_scans_as_the_python_reference(new_put_path: PutPathFactory) -> None:
    path = new_put_path()
    for i in range(60):  # plain topics: several queues interleaved, keys, tags, no properties
        topic = "T" if i % 3 else "U"
        path.put(topic, i % 4, keyed(i, topic, size=100 + i % 5 * 40) + keyed(1000 + i, topic))
        if i % 7 == 0:
            path.put("V", 0, make_record("V", b"no properties"))
    store = path.store
    disp = store.dispatcher
    scan = record.speedups.dispatch_scan
    scanned = 0
    for mm, base, records in file_records(store):
        for cut in (records, records[5:17], records[:1], []):
            reference = disp.scan_stored_py(mm, 0, base, cut)  # (it learns the topics)
            assert scan(mm, 0, base, cut, disp._stored_topics) == reference
            scanned += len(cut)
            # The same records, a queue's offsets broken: the run ends there and a new one begins.
            gapped = [(*r[:5], r[5] + (100 if i >= len(cut) // 2 else 0), r[6]) for i, r in enumerate(cut)]
            assert scan(mm, 0, base, gapped, disp._stored_topics) == disp.scan_stored_py(mm, 0, base, gapped)
    assert scanned > 100
    mm, base, records = file_records(store)[0]
    runs, index = disp.scan_stored_py(mm, 0, base, records)
    assert {(t, q) for t, q, _, _ in runs} >= {("T", 1), ("U", 0)} and index  # (the cases were there)


def test_it_hands_back_what_it_does_not_handle(new_put_path: PutPathFactory) -> None:
    path = new_put_path()
    put_mixed(path.put, 20)  # with delayed records: the schedule topic has its own tags rule
    store = path.store
    disp = store.dispatcher
    mm, base, records = file_records(store)[0]
    scan = record.speedups.dispatch_scan
    assert scan(mm, 0, base, records, {}) is NotImplemented  # no topic learnt yet
    disp.scan_stored_py(mm, 0, base, records)
    assert any(v[1] < 0 for v in disp._stored_topics.values())  # the schedule topic: -1
    assert scan(mm, 0, base, records, disp._stored_topics) is NotImplemented
    plain = [r for r in records if bytes(mm[r[2] : r[3] - 2]) != SCHEDULE_TOPIC.encode()]
    assert plain and scan(mm, 0, base, plain, disp._stored_topics) == disp.scan_stored_py(mm, 0, base, plain)
    # and scan_stored takes the reference's way for those: the same answer
    assert disp.scan_stored(mm, 0, base, records) == disp.scan_stored_py(mm, 0, base, records)
    first = records[0]
    for bad in (
        [(first[0], first[1], first[2], first[3], first[4], first[5])],  # not 7 fields
        [(first[0], len(mm) + 1, *first[2:])],  # past the buffer
        [(first[0], first[1], first[3], first[2], *first[4:])],  # topic after properties
        [(*first[:4], "0", *first[5:])],  # a queue id not an int
        [list(first)],
    ):
        assert scan(mm, 0, base, bad, disp._stored_topics) is NotImplemented
    assert scan(b"\x00" * 10, 0, 0, [], {}) == ([], [])
    assert scan(object(), 0, 0, [], {}) is NotImplemented
