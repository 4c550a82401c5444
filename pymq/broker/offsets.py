"""Committed consumer offsets: ``topic@group -> {queueId -> next offset to consume}``.

Persisted in ``<storeDir>/config/consumerOffset.json`` every few seconds and at shutdown
(standard JSON: queue ids become string keys). The periodic write runs on a thread
(:meth:`ConsumerOffsetManager.persist_in_thread`): a large table's JSON and its two fsyncs must
not stall the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from pymq.broker.store.config_files import read_json, write_json_atomic


class ConsumerOffsetManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.table: dict[str, dict[int, int]] = {}
        self._dirty = False
        #: one write at a time: the last write to finish must be the latest snapshot (a periodic
        #: write on its thread and the shutdown's write may overlap)
        self._write_lock = threading.Lock()

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def load(self) -> None:
        data = read_json(self.path)
        if data:
            for key, offsets in data.get("offsetTable", {}).items():
                self.table[key] = {int(q): int(o) for q, o in offsets.items()}

    def wire_table(self) -> dict[str, dict[str, int]]:
        """Every ``topic@group`` key's offsets by queue id as text (the file's and GET_ALL_CONSUMER_OFFSET's form)."""
        return {k: {str(q): o for q, o in sorted(v.items())} for k, v in sorted(self.table.items())}

    def persist(self) -> None:
        with self._write_lock:
            self._dirty = False
            # wire_table() copies each dict with sorted() (one C call each): safe off the loop
            write_json_atomic(self.path, {"offsetTable": self.wire_table()})

    def persist_if_dirty(self) -> bool:
        if self._dirty:
            self.persist()
            return True
        return False

    async def persist_in_thread(self) -> bool:
        """:meth:`persist_if_dirty` on a worker thread (the periodic write)."""
        if not self._dirty:
            return False
        return await asyncio.to_thread(self.persist_if_dirty)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        offsets = self.table.setdefault(self.key(topic, group), {})
        if offsets.get(queue_id) != offset:
            offsets[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for this queue."""
        return self.table.get(self.key(topic, group), {}).get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(self.key(topic, group), {}))

    def groups_of_topic(self, topic: str) -> list[str]:
        prefix = topic + "@"
        return sorted(k[len(prefix) :] for k in self.table if k.startswith(prefix))

    def topics_of_group(self, group: str) -> list[str]:
        suffix = "@" + group
        return sorted(k[: -len(suffix)] for k in self.table if k.endswith(suffix))

    def delete_topic(self, topic: str) -> None:
        prefix = topic + "@"
        for k in [k for k in self.table if k.startswith(prefix)]:
            del self.table[k]
            self._dirty = True

    def delete_group(self, group: str) -> None:
        suffix = "@" + group
        for k in [k for k in self.table if k.endswith(suffix)]:
            del self.table[k]
            self._dirty = True
