"""The store's consume queues by (topic, queue id), and the map pool and dirty set they share.

A queue is made on first use (:meth:`QueueTable.queue_for`: a put creates its queue) or found
on disk at start (:meth:`QueueTable.load`). After a clean shutdown the queues' ends come from
:mod:`pymq.broker.store.queue_ends` (no file mapped at start); :meth:`QueueTable.save_ends`
writes them at the next clean shutdown. Queue files are mapped through one
:class:`~pymq.broker.store.map_pool.MapPool` (lazily, no descriptor kept, LRU-bounded by
``consume_queue_max_mapped_files``), and a write adds its queue to :attr:`QueueTable.dirty`,
so a flush pass syncs only the queues written since the last one.
"""

from __future__ import annotations

from pathlib import Path

from pymq.broker.store import queue_ends
from pymq.broker.store.consume_queue import ConsumeQueue
from pymq.broker.store.map_pool import MapPool
from pymq.config import StoreConfig


class QueueTable:
    def __init__(self, root: Path, config: StoreConfig) -> None:
        self.root = root
        self.config = config
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        #: consume-queue files are mapped through this (lazily, no descriptor, LRU-bounded)
        self.map_pool = MapPool(config.consume_queue_max_mapped_files)
        #: queues written since the last logics flush (a flush pass syncs only these)
        self.dirty: set[ConsumeQueue] = set()

    def load(self, *, abnormal: bool, clean_end: int) -> tuple[int, int] | None:
        """Open every queue on disk; returns the commitlog (min, end) the restored ends were recorded
        with (None: none restored, each queue found its ends in its files)."""
        # After a clean shutdown its record of the queues' ends saves mapping every queue file.
        taken = queue_ends.take(self.root)
        ends: queue_ends.QueueEnds = {}
        restored_range = None
        if taken is not None and not abnormal and taken[0][1] == clean_end:
            restored_range = taken[0]
            ends = taken[1]
        base = self.root / "consumequeue"
        if not base.exists():
            return restored_range
        entries = self.config.consume_queue_file_entries
        for topic_dir in sorted(base.iterdir()):
            if not topic_dir.is_dir():
                continue
            for qdir in sorted(topic_dir.iterdir()):
                if not qdir.name.isdigit() or not qdir.is_dir():
                    continue
                key = (topic_dir.name, int(qdir.name))
                cq = ConsumeQueue(key[0], key[1], qdir, entries, pool=self.map_pool, dirty=self.dirty)
                known = ends.get(key)
                if known is None or not cq.restore(*known):
                    cq.recover()
                self.queues[key] = cq
        return restored_range

    def queue_for(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, made (with no file yet) if it does not exist."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            directory = self.root / "consumequeue" / topic / str(queue_id)
            cq = ConsumeQueue(
                topic,
                queue_id,
                directory,
                self.config.consume_queue_file_entries,
                pool=self.map_pool,
                dirty=self.dirty,
            )
            self.queues[(topic, queue_id)] = cq
        return cq

    def save_ends(self, commitlog_range: tuple[int, int]) -> None:
        """Record every queue's ends for the next start (at a clean shutdown, everything flushed)."""
        queue_ends.save(
            self.root,
            commitlog_range,
            ((t, q, cq.min_offset, cq.max_offset) for (t, q), cq in self.queues.items()),
        )
