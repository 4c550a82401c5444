"""Where a joining slave's store stops agreeing with its master's: the epoch check (pure, no I/O).

A slave sends its epoch list (:mod:`pymq.broker.ha.epoch_file`) and commitlog end; the
master compares them with its own. The newest term both lists hold with the same epoch,
start offset and term id was written by the same master from the same point, so both
stores hold the same bytes up to where the shorter of the two copies of that term ends:
the last common point. What the slave holds past it, its master never had (an old
master's unreplicated tail, a store from another group): the slave truncates it, and
replication goes on from the point. No common term (or a slave with data but no epoch
list) means nothing can be proven: the slave is refused, never silently mixed.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pymq.broker.ha.epoch_file import EpochEntry

Action = Literal["stream", "truncate", "refuse"]

#: bytes before a slave's end whose CRC it sends, to be compared with the master's
TAIL_CHECK_BYTES = 4096


def tail_range(max_offset: int, min_offset: int = 0) -> tuple[int, int]:
    """The ``(offset, size)`` whose CRC a store at ``max_offset`` sends."""
    start = max(min_offset, max_offset - TAIL_CHECK_BYTES)
    return start, max_offset - start


def crc_of(views: Iterable[bytes | memoryview]) -> int:
    crc = 0
    for v in views:
        crc = zlib.crc32(v, crc)
    return crc


@dataclass(frozen=True, slots=True)
class JoinDecision:
    """``stream``: replicate from ``offset``; ``truncate``: cut the slave to ``offset`` first; ``refuse``."""

    action: Action
    offset: int
    reason: str


def term_end(entries: list[EpochEntry], i: int, max_offset: int) -> int:
    """Where a store's data of term ``i`` ends: the next term's start, never past its commitlog end.

    (A slave records its master's terms when it joins, before it holds their data.)
    """
    return min(entries[i + 1].start_offset, max_offset) if i + 1 < len(entries) else max_offset


def last_common_point(master: list[EpochEntry], master_max: int, slave: list[EpochEntry], slave_max: int) -> int | None:
    """The offset up to which both stores hold the same terms, or None if they share none."""
    by_epoch = {e.epoch: i for i, e in enumerate(master)}
    for j in range(len(slave) - 1, -1, -1):
        e = slave[j]
        i = by_epoch.get(e.epoch)
        if i is None or master[i].start_offset != e.start_offset or master[i].term_id != e.term_id:
            continue
        return min(term_end(slave, j, slave_max), term_end(master, i, master_max))
    return None


def decide_join(
    master: list[EpochEntry],
    master_min: int,
    master_max: int,
    slave: list[EpochEntry],
    slave_max: int,
    tail_crcs: tuple[int, int] | None = None,
) -> JoinDecision:
    """What a slave with ``slave`` terms and commitlog end ``slave_max`` must do to follow this master.

    ``tail_crcs``: the slave's and the master's CRC of the bytes before ``slave_max`` (None: the
    master does not hold them all), checked when the slave is to continue from its own end.
    """
    if slave_max == 0:
        return JoinDecision("stream", master_min, "empty slave: starting from the master's oldest data")
    if not slave:
        return JoinDecision(
            "refuse",
            slave_max,
            f"slave holds data (up to {slave_max}) but no epoch history: cannot prove it is the master's; "
            "empty its store to let it copy the master",
        )
    point = last_common_point(master, master_max, slave, slave_max)
    if point is None:
        return JoinDecision(
            "refuse",
            slave_max,
            f"slave and master share no term (slave epochs {[e.epoch for e in slave]}, "
            f"master epochs {[e.epoch for e in master]}): the stores diverged",
        )
    if point < master_min:
        return JoinDecision("refuse", point, f"the common point {point} is below the master's oldest data {master_min}")
    if point < slave_max:
        return JoinDecision(
            "truncate",
            point,
            f"slave holds {slave_max - point} bytes past the last common point {point} that the master lacks",
        )
    if tail_crcs is not None and tail_crcs[0] != tail_crcs[1]:
        return JoinDecision(
            "refuse",
            slave_max,
            f"the slave's last bytes before {slave_max} differ from the master's: the stores diverged "
            "although their epoch lists agree",
        )
    return JoinDecision("stream", slave_max, "slave continues from its own offset")
