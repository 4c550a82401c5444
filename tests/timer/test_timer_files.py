"""TimerLog, TimerWheel and their recovery, without a broker (pure file formats)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.broker.timer.checkpoint import TimerCheckpoint
from pymq.broker.timer.timer_log import FLAG_MERGE, UNIT_SIZE, TimerLog
from pymq.broker.timer.timer_store import TimerFiles
from pymq.broker.timer.timer_wheel import TimerWheel

P = 1000


def files(root: Path, log_units: int = 8) -> TimerFiles:
    return TimerFiles(root, slots=100, precision_ms=P, log_file_size=log_units * UNIT_SIZE)


def test_units_of_a_slot_come_back_in_filing_order_across_segments(tmp_path: Path) -> None:
    f = files(tmp_path)
    f.load(0, {})
    for i in range(20):  # 20 units over 3 segments of 8, interleaved over two slots
        f.add(5000 if i % 2 else 7000, 5000 + i, 100 + i, 10, FLAG_MERGE if i == 3 else 0)
    got = f.units(5000)
    assert [u.phys for u in got] == [100 + i for i in range(1, 20, 2)]
    assert [u.flags for u in got if u.phys == 103] == [FLAG_MERGE]
    assert [u.phys for u in f.units(7000)] == [100 + i for i in range(0, 20, 2)]
    assert f.units(6000) == []
    assert f.wheel.get(5000).num == 10
    f.close()


def test_slot_from_an_older_round_of_the_ring_reads_as_empty(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "w", slots=10, precision_ms=P)
    wheel.put(3000, 0, 0, 1)
    assert wheel.get(3000).num == 1
    assert wheel.get(13000).num == 0  # same index, next round
    assert wheel.slot_of(13999) == 13000
    wheel.close()


def test_recover_unlinks_units_written_after_the_checkpoint(tmp_path: Path) -> None:
    f = files(tmp_path)
    f.load(0, {})
    for i in range(5):
        f.add(2000, 2000 + i, i, 1)
    checkpoint_pos = f.log.write_pos
    for i in range(5, 12):  # after the checkpoint: into slot 2000 and a new slot 9000
        f.add(2000 if i < 8 else 9000, 2000, i, 1)
    f.flush()
    f.close()  # a crash: files as they were, checkpoint older

    g = files(tmp_path)
    assert g.load(checkpoint_pos, {0: 2000}) == 7
    assert [u.phys for u in g.units(2000)] == [0, 1, 2, 3, 4]
    assert g.units(9000) == []
    assert g.log.write_pos == checkpoint_pos
    assert list(g.log.scan(checkpoint_pos)) == []
    pos = g.add(2000, 2000, 99, 1)  # filing goes on from the checkpoint
    assert pos == checkpoint_pos and [u.phys for u in g.units(2000)][-1] == 99
    g.close()


def test_segments_go_once_their_slots_fired(tmp_path: Path) -> None:
    f = files(tmp_path, log_units=4)
    f.load(0, {})
    for i in range(12):  # three segments: slots 1000.., 5000.., 9000..
        f.add(1000 + (i // 4) * 4000, 0, i, 1)
    f.add(1000, 0, 99, 1)  # a fourth segment, being written
    assert f.log.segment_starts() == [0, 160, 320, 480]
    assert f.release(4000) == 1  # the first segment's slot (1000) fired
    assert f.log.segment_starts() == [160, 320, 480]
    assert f.release(100_000) == 2  # never the segment being written
    assert f.log.segment_starts() == [480]
    f.close()


def test_log_rejects_a_file_size_that_is_not_whole_units(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple of 40"):
        TimerLog(tmp_path, 100)


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    ck = TimerCheckpoint({0: 5, 1: 2}, 400, 12000, {0: 13000}, {"t\x01k": [1, 2, 3, 4]})
    ck.save(tmp_path / "ck.json")
    assert TimerCheckpoint.load(tmp_path / "ck.json") == ck
    assert TimerCheckpoint.load(tmp_path / "missing.json") is None
