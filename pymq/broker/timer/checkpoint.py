"""TimerCheckpoint: how far the timer service got, and the merged-delay index, in one file.

``<store>/timer/timerCheckpoint.json`` (written atomically, previous version kept as ``.bak``)::

    queueOffsets    timer-topic queue id -> next consume-queue offset to file (enqueue progress)
    timerLogPos     the TimerLog end matching those offsets
    cursorMs        the first wheel slot not yet completely delivered (dequeue progress)
    segmentMaxSlot  TimerLog segment start -> its latest slot (when the segment may go)
    merge           "<topic>\\u0001<key>" -> [deliver_ms, last phys, last size, merged count]
    pendingByTopic  real topic -> timers filed, not yet delivered

Everything is one snapshot taken between two steps of the service, so the parts agree:
after a crash the TimerLog is cut back to ``timerLogPos`` and filing resumes at
``queueOffsets`` (each message filed once), and delivery resumes at ``cursorMs`` (slots
delivered since the snapshot are delivered again: at-least-once, never early).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymq.broker.store.config_files import read_json, write_json_atomic


@dataclass
class TimerCheckpoint:
    queue_offsets: dict[int, int] = field(default_factory=dict)
    timer_log_pos: int = 0
    cursor_ms: int = -1
    segment_max_slot: dict[int, int] = field(default_factory=dict)
    merge: dict[str, list[int]] = field(default_factory=dict)
    #: real topic -> timers filed and not yet delivered (RocketMQ's TimerMetrics)
    pending_by_topic: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "queueOffsets": {str(k): v for k, v in sorted(self.queue_offsets.items())},
            "timerLogPos": self.timer_log_pos,
            "cursorMs": self.cursor_ms,
            "segmentMaxSlot": {str(k): v for k, v in sorted(self.segment_max_slot.items())},
            "merge": self.merge,
            "pendingByTopic": self.pending_by_topic,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TimerCheckpoint:
        return cls(
            queue_offsets={int(k): int(v) for k, v in (data.get("queueOffsets") or {}).items()},
            timer_log_pos=int(data.get("timerLogPos", 0)),
            cursor_ms=int(data.get("cursorMs", -1)),
            segment_max_slot={int(k): int(v) for k, v in (data.get("segmentMaxSlot") or {}).items()},
            merge={str(k): [int(x) for x in v] for k, v in (data.get("merge") or {}).items()},
            pending_by_topic={str(k): int(v) for k, v in (data.get("pendingByTopic") or {}).items()},
        )

    @classmethod
    def load(cls, path: Path) -> TimerCheckpoint | None:
        data = read_json(path)
        return None if data is None else cls.from_json(data)

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())


__all__ = ["TimerCheckpoint"]
