"""The revive log's records: checkpoints and acks, stored as messages of an internal topic.

As RocketMQ does, pop state is written to the commitlog as messages of
``rmq_sys_REVIVE_LOG_<cluster>`` (one of its queues per group/topic hash): a
**checkpoint** (tag ``ck``) per popped batch of one queue — group, topic, queue, the
popped queue offsets, the queue's next offset after them, pop time, invisible time — and
an **ack** (tag ``ack``) naming a checkpoint by its commitlog offset and the indexes of
the messages acked, or several checkpoints of its revive queue and the indexes of each
(``{"ck":[c1,c2],"i":[[0,3],[5]]}``: a batch ack of messages of several batches is one
record). A change of invisible time is a new one-message checkpoint plus an ack of the old
index, stored as one batch. Bodies are compact JSON (RocketMQ's PopCheckPoint
and AckMsg are JSON too).
"""

from __future__ import annotations

import json
import zlib
from array import array
from dataclasses import dataclass
from typing import Any

from pymq.protocol.message import Prop
from pymq.protocol.record import encode_properties, encode_record

CK_TAG = "ck"
ACK_TAG = "ack"
_CK_PROPS = encode_properties({Prop.TAGS: CK_TAG})
_ACK_PROPS = encode_properties({Prop.TAGS: ACK_TAG})


def revive_topic(cluster: str) -> str:
    """RocketMQ's name for the revive log topic."""
    return f"rmq_sys_REVIVE_LOG_{cluster}"


def revive_queue_of(group: str, topic: str, queues: int) -> int:
    """The revive queue of a group's checkpoints of one topic: stable across restarts (crc32, not
    ``hash``). Every queue of the topic shares it, so that the acks of one batch ack, which go to
    their checkpoints' revive queue, make one record (checkpoints written by earlier versions sit
    in a queue per topic queue; their acks go where they are)."""
    return zlib.crc32(f"{group}@{topic}".encode()) % queues


@dataclass(slots=True)
class CheckPoint:
    """One popped batch of one queue (RocketMQ's PopCheckPoint)."""

    group: str
    topic: str
    queue_id: int
    #: queue offsets of the popped messages, in order (a message's index is its bit); an int64 array
    #: in memory (8 bytes an offset instead of an int object each: the open-checkpoint index is per batch)
    offsets: array[int]
    #: the queue's offset after the batch (what the group's offset was moved to)
    next_offset: int
    pop_time: int
    invisible_ms: int
    #: set once stored: commitlog offset of the record (identity) and where it sits in the revive log
    ck_offset: int = -1
    revive_qid: int = -1
    revive_offset: int = -1
    #: bit i set: message i acked (or its handle replaced by a newer checkpoint)
    acked: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.offsets, array):
            self.offsets = array("q", self.offsets)

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_ms

    @property
    def all_acked(self) -> bool:
        return self.acked == (1 << len(self.offsets)) - 1

    def unacked(self) -> list[int]:
        """Indexes not acked yet."""
        return [i for i in range(len(self.offsets)) if not self.acked >> i & 1]

    def to_record(self, revive: str) -> bytes:
        # compact JSON, formatted by hand (json.dumps of the whole map costs more than the rest of
        # a pop's checkpoint); the strings go through json.dumps for their escaping
        body = (
            f'{{"c":{json.dumps(self.group)},"t":{json.dumps(self.topic)},"q":{self.queue_id},'
            f'"o":[{",".join(map(str, self.offsets))}],"nb":{self.next_offset},'
            f'"pt":{self.pop_time},"it":{self.invisible_ms}}}'
        )
        return encode_record(revive.encode(), body.encode(), _CK_PROPS, born_timestamp=self.pop_time)

    @classmethod
    def from_body(cls, body: bytes | memoryview) -> CheckPoint:
        """The checkpoint of a revive log body; ValueError, KeyError or TypeError if it is not one."""
        d = _json(body)
        try:
            offsets = array("q", d["o"])
            ck = cls(str(d["c"]), str(d["t"]), int(d["q"]), offsets, int(d["nb"]), int(d["pt"]), int(d["it"]))
        except OverflowError as exc:  # an offset beyond int64, or int() of an infinite number
            raise ValueError(f"checkpoint number out of range: {exc}") from exc
        if not all(_I64_MIN <= v <= _I64_MAX for v in (ck.queue_id, ck.next_offset, ck.pop_time, ck.invisible_ms)):
            raise ValueError("checkpoint number out of range")  # (to_record could not write it back)
        return ck


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _json(body: bytes | memoryview) -> dict[str, Any]:
    """A revive record's JSON body as a map; ValueError if it is not one (nesting too deep included)."""
    try:
        d = json.loads(bytes(body))
    except RecursionError as exc:
        raise ValueError("revive record nested too deep") from exc
    if not isinstance(d, dict):
        raise ValueError("revive record is not a JSON object")
    return d


def ack_record(revive: str, ck_offset: int, indexes: list[int], now: int) -> bytes:
    body = f'{{"ck":{int(ck_offset)},"i":[{",".join([str(int(i)) for i in indexes])}]}}'  # compact JSON, by hand
    return encode_record(revive.encode(), body.encode(), _ACK_PROPS, born_timestamp=now)


def acks_record(revive: str, acks: list[tuple[int, list[int]]], now: int) -> bytes:
    """One ack record for checkpoints of one revive queue: ``(checkpoint offset, indexes)`` each."""
    if len(acks) == 1:
        return ack_record(revive, acks[0][0], acks[0][1], now)
    cks = ",".join([str(int(c)) for c, _ in acks])
    indexes = ",".join(["[" + ",".join([str(int(i)) for i in ii]) + "]" for _, ii in acks])
    body = f'{{"ck":[{cks}],"i":[{indexes}]}}'
    return encode_record(revive.encode(), body.encode(), _ACK_PROPS, born_timestamp=now)


def parse_ack(body: bytes | memoryview) -> list[tuple[int, list[int]]]:
    """``(checkpoint offset, acked indexes)`` of each checkpoint an ack body names; ValueError,
    KeyError or TypeError if it is not one."""
    d = _json(body)
    try:
        ck, indexes = d["ck"], d["i"]
        if isinstance(ck, list):
            if len(ck) != len(indexes):
                raise ValueError("ack record names checkpoints and index lists of different counts")
            return [(int(c), [int(i) for i in ii]) for c, ii in zip(ck, indexes, strict=True)]
        return [(int(ck), [int(i) for i in indexes])]
    except OverflowError as exc:  # int() of an infinite number
        raise ValueError(f"ack number out of range: {exc}") from exc
