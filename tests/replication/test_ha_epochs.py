"""The epoch file format (atomic writes) and the join decision of the epoch check."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.broker.ha.epoch_file import EpochEntry as E
from pymq.broker.ha.epoch_file import EpochFile, parse, render
from pymq.broker.ha.epochs import decide_join, last_common_point
from pymq.errors import StoreError


def test_epoch_file_round_trip_and_atomic_replace(tmp_path: Path) -> None:
    f = EpochFile(tmp_path)
    assert f.load() == [] and f.epoch == 0
    f.begin_term(1, 0)
    f.begin_term(3, 500)
    again = EpochFile(tmp_path)
    assert [(e.epoch, e.start_offset) for e in again.load()] == [(1, 0), (3, 500)]
    text = (tmp_path / "epoch").read_text().splitlines()
    assert text[0] == "pymq-epochs 1" and [ln.split()[:2] for ln in text[1:]] == [["1", "0"], ["3", "500"]]
    assert again.entries[0].term_id != again.entries[1].term_id
    assert not (tmp_path / "epoch.tmp").exists()
    # A new term below entries that start past it drops them (they were never this store's data).
    again.begin_term(4, 300)
    assert [(e.epoch, e.start_offset) for e in again.entries] == [(1, 0), (4, 300)]
    assert EpochFile(tmp_path).load() == again.entries
    with pytest.raises(StoreError):
        again.begin_term(4, 900)  # an epoch must rise above every known one
    with pytest.raises(StoreError):
        again.begin_term(3, 900)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "pymq-epochs 2\n",
        "pymq-epochs 1\n1\n",
        "pymq-epochs 1\n1 0\n",
        "pymq-epochs 1\n1 0 xyz\n",
        "pymq-epochs 1\n2 0 1\n1 5 2\n",
        "pymq-epochs 1\n1 9 1\n2 5 2\n",
        "x 1\n",
    ],
)
def test_parse_refuses_malformed_files(text: str) -> None:
    with pytest.raises(StoreError):
        parse(text)


def test_render_parse_inverse() -> None:
    entries = [E(1, 0, 5), E(2, 0, 2**64 - 1), E(7, 12345, 0)]
    assert parse(render(entries)) == entries


M = [E(1, 0), E(2, 1000), E(4, 5000)]


@pytest.mark.parametrize(
    ("slave", "slave_max", "action", "offset"),
    [
        ([], 0, "stream", 100),  # empty: from the master's oldest data
        ([E(1, 0), E(2, 1000)], 3000, "stream", 3000),  # behind, same history
        ([E(1, 0), E(2, 1000), E(4, 5000)], 6000, "stream", 6000),
        ([E(1, 0), E(2, 1000), E(4, 5000)], 9000, "truncate", 8000),  # master lost a tail
        ([E(1, 0), E(2, 1000), E(3, 4000)], 4500, "truncate", 4000),  # an old master's unreplicated term
        ([E(1, 0), E(2, 1000), E(3, 6000)], 6500, "truncate", 5000),
        ([E(1, 0), E(2, 900)], 2000, "truncate", 900),  # term 2 started elsewhere: common up to 900
        ([E(1, 0), E(2, 1000), E(3, 6000)], 2500, "stream", 2500),  # knows term 3, holds none of it
        ([E(1, 0), E(2, 9000)], 800, "stream", 800),  # term 2 unknown to the master, but holds none of it
        ([E(9, 0)], 10, "refuse", 10),  # no common term
        ([], 10, "refuse", 10),  # data without history
    ],
)
def test_decide_join(slave: list[E], slave_max: int, action: str, offset: int) -> None:
    d = decide_join(M, 100, 8000, slave, slave_max)
    assert (d.action, d.offset) == (action, offset), d.reason


def test_common_point_below_masters_oldest_data_is_refused() -> None:
    d = decide_join(M, 4000, 8000, [E(1, 0), E(2, 1000), E(3, 3000)], 3500)
    assert d.action == "refuse" and "oldest" in d.reason


def test_last_common_point_none_without_shared_term() -> None:
    assert last_common_point(M, 8000, [E(5, 0)], 10) is None


def test_same_epoch_number_of_another_term_is_no_common_point() -> None:
    """Two masters started on their own both begin with epoch 1 at 0: their term ids differ."""
    assert decide_join([E(1, 0, 111)], 0, 5000, [E(1, 0, 222)], 3000).action == "refuse"
    assert decide_join([E(1, 0, 111)], 0, 5000, [E(1, 0, 111)], 3000).action == "stream"


def test_tail_bytes_that_differ_are_refused() -> None:
    assert decide_join(M, 0, 8000, M, 6000, (1, 2)).action == "refuse"
    assert decide_join(M, 0, 8000, M, 6000, (7, 7)).action == "stream"
