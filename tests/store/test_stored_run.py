"""A batch stored whole answers one StoredRun: the same results as the list of PutResults, made on access."""

from __future__ import annotations

import pytest

from pymq.broker.store import MessageStore, PutResult, PutStatus
from pymq.broker.store.results import StoredRun
from pymq.protocol.record import encode_record

RUN = StoredRun("T", 3, 10, [1000, 1100, 1250], [100, 150, 90], 77)
AS_LIST = [
    PutResult(PutStatus.PUT_OK, 10, 1000, 100, 77, "T", 3, ""),
    PutResult(PutStatus.PUT_OK, 11, 1100, 150, 77, "T", 3, ""),
    PutResult(PutStatus.PUT_OK, 12, 1250, 90, 77, "T", 3, ""),
]


def test_a_run_is_the_sequence_of_its_results() -> None:
    assert list(RUN) == AS_LIST and len(RUN) == 3 and RUN
    assert RUN == AS_LIST and AS_LIST == RUN and tuple(AS_LIST) == RUN and AS_LIST[:2] != RUN
    assert [RUN[i] for i in range(3)] == AS_LIST == [RUN[i - 3] for i in range(3)]
    assert RUN[1:] == AS_LIST[1:] and RUN[::-1] == AS_LIST[::-1]
    assert all(type(r) is PutResult for r in RUN) and RUN[0].status is PutStatus.PUT_OK
    assert AS_LIST[2] in RUN and RUN.index(AS_LIST[1]) == 1 and list(reversed(RUN)) == AS_LIST[::-1]
    with pytest.raises(IndexError):
        RUN[3]
    with pytest.raises(IndexError):
        RUN[-4]
    with pytest.raises(TypeError):
        hash(RUN)
    assert "StoredRun([PutResult(" in repr(RUN)
    assert RUN + AS_LIST[:1] == AS_LIST + AS_LIST[:1] and AS_LIST[:1] + RUN == AS_LIST[:1] + AS_LIST
    assert type(RUN + RUN) is list and RUN + RUN == AS_LIST * 2


def test_a_whole_batch_answers_a_run_and_a_partial_one_a_list(store: MessageStore, record_impl: str) -> None:
    good = [encode_record(b"T", b"body %d" % i, b"") for i in range(3)]
    whole = store.put("T", 1, b"".join(good))
    assert type(whole) is StoredRun and [r.queue_offset for r in whole] == [0, 1, 2]
    first = whole[0].physical_offset
    assert [r.physical_offset for r in whole] == [first, first + len(good[0]), first + len(good[0]) + len(good[1])]
    assert all(r.status is PutStatus.PUT_OK and r.topic == "T" and r.queue_id == 1 for r in whole)
    bad = bytearray(good[1])
    bad[90] ^= 0xFF  # a body byte: the CRC no longer matches
    partial = store.put("T", 1, good[0] + bytes(bad) + good[2])
    assert type(partial) is list
    assert [r.status for r in partial] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL, PutStatus.PUT_OK]
    assert [r.queue_offset for r in partial] == [3, -1, 4]
    single = store.put("T", 1, good[0])
    assert type(single) is list and single[0].queue_offset == 5
