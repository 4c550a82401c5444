"""Index files: a hash index from ``topic#key`` to commitlog offsets, for lookups by key.

One file (``index/<yyyyMMddHHmmssSSS>``, named by creation time) holds::

    header   40 bytes: begin_ts i64 | end_ts i64 | begin_phys i64 | end_phys i64 |
                       hash_slot_count i32 | index_count i32
    slots    hash_slot_count x i32: the newest entry number for that slot (0 = empty)
    entries  max_entries x 20 bytes: key_hash u32 | phys i64 | time_diff i32 | prev i32

``time_diff`` is seconds since ``begin_ts``; ``prev`` chains entries of the same slot from
newest to oldest (0 ends the chain). Entry 0 is never used, so ``index_count`` starts at 1
and the file is full when it reaches ``max_entries``. The hash is crc32 of the UTF-8 key:
different keys can share it, so callers check the key stored in the record.
"""

from __future__ import annotations

import struct
import time
import zlib
from pathlib import Path

from pymq.broker.store.mapped_file import MappedFile

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
ENTRY = struct.Struct(">Iqii")
ENTRY_SIZE = ENTRY.size  # 20
_SLOT = struct.Struct(">i")
_COUNT_POS = 36


def key_hash(topic_key: bytes) -> int:
    return zlib.crc32(topic_key)


def index_file_size(slots: int, entries: int) -> int:
    return HEADER_SIZE + slots * 4 + entries * ENTRY_SIZE


def _name_for(ts_ms: int) -> str:
    t = time.localtime(ts_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ts_ms % 1000:03d}"


class IndexFile:
    __slots__ = (
        "begin_phys",
        "begin_ts",
        "count",
        "end_phys",
        "end_ts",
        "entries_base",
        "max_entries",
        "mf",
        "mm",
        "slots",
    )

    def __init__(self, mf: MappedFile, slots: int, max_entries: int, *, new: bool) -> None:
        self.mf = mf
        self.mm = mf.mm
        self.slots = slots
        self.max_entries = max_entries
        self.entries_base = HEADER_SIZE + slots * 4
        if new:
            self.begin_ts = self.end_ts = self.begin_phys = self.end_phys = 0
            self.count = 1
            self.write_header()
        else:
            (self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, stored_slots, self.count) = (
                HEADER.unpack_from(self.mm, 0)
            )
            if stored_slots != slots:
                raise ValueError(f"{mf.path} has {stored_slots} hash slots, configured {slots}")
            self.count = max(1, self.count)

    @property
    def is_full(self) -> bool:
        return self.count >= self.max_entries

    def write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slots, self.count)

    def put(self, h: int, phys: int, store_ts: int) -> bool:
        """Add one entry; False when the file is full. The header is written by the caller."""
        count = self.count
        if count >= self.max_entries:
            return False
        mm = self.mm
        slot_pos = HEADER_SIZE + (h % self.slots) * 4
        prev = _SLOT.unpack_from(mm, slot_pos)[0]
        if prev <= 0 or prev > count:
            prev = 0
        if self.begin_ts == 0:
            self.begin_ts = store_ts
            self.begin_phys = phys
        ENTRY.pack_into(mm, self.entries_base + count * ENTRY_SIZE, h, phys, (store_ts - self.begin_ts) // 1000, prev)
        # Entry, then count, then slot: a crash between them loses at most this one entry
        # from its chain, never a slot pointing past the count.
        self.count = count + 1
        _SLOT.pack_into(mm, _COUNT_POS, count + 1)
        _SLOT.pack_into(mm, slot_pos, count)
        self.end_ts = store_ts
        self.end_phys = phys
        return True

    def put_many(self, entries: list[tuple[int, int]], store_ts: int) -> int:
        """:meth:`put` for many entries of one store time; returns how many fit."""
        mm = self.mm
        slots = self.slots
        base = self.entries_base
        count = self.count
        room = self.max_entries - count
        if room <= 0:
            return 0
        todo = entries if len(entries) <= room else entries[:room]
        if self.begin_ts == 0:
            self.begin_ts = store_ts
            self.begin_phys = todo[0][1]
        tdiff = (store_ts - self.begin_ts) // 1000
        unpack_slot = _SLOT.unpack_from
        pack_slot = _SLOT.pack_into
        pack_entry = ENTRY.pack_into
        for h, phys in todo:
            slot_pos = HEADER_SIZE + (h % slots) * 4
            prev = unpack_slot(mm, slot_pos)[0]
            if prev <= 0 or prev > count:
                prev = 0
            pack_entry(mm, base + count * ENTRY_SIZE, h, phys, tdiff, prev)
            count += 1
            # Entry, then count, then slot: a crash between them loses at most this one entry
            # from its chain, never leaves a slot pointing past the count.
            pack_slot(mm, _COUNT_POS, count)
            pack_slot(mm, slot_pos, count - 1)
        self.count = count
        self.end_ts = store_ts
        self.end_phys = todo[-1][1]
        return len(todo)

    def lookup(self, h: int, begin_ts: int, end_ts: int, limit: int, out: list[int]) -> None:
        """Append to ``out`` the commitlog offsets of entries with hash ``h`` stored in [begin_ts, end_ts]."""
        mm = self.mm
        cur = _SLOT.unpack_from(mm, HEADER_SIZE + (h % self.slots) * 4)[0]
        count = self.count
        seen = 0
        while 0 < cur < count and len(out) < limit and seen < count:
            eh, phys, tdiff, prev = ENTRY.unpack_from(mm, self.entries_base + cur * ENTRY_SIZE)
            seen += 1
            ts = self.begin_ts + tdiff * 1000
            # time_diff has second precision: widen the window by a second on each side
            if eh == h and begin_ts - 1000 <= ts <= end_ts + 1000:
                out.append(phys)
            if prev <= 0 or prev >= cur:
                break
            cur = prev


class IndexService:
    """The index files of a store: the newest is written, all are searched newest first."""

    def __init__(self, directory: Path, slots: int, max_entries: int) -> None:
        self.directory = directory
        self.slots = slots
        self.max_entries = max_entries
        self.file_size = index_file_size(slots, max_entries)
        self.files: list[IndexFile] = []

    def load(self) -> None:
        if not self.directory.exists():
            return
        for path in sorted(p for p in self.directory.iterdir() if p.name.isdigit()):
            if path.stat().st_size != self.file_size:
                path.unlink()  # a file from a different configuration or a torn creation
                continue
            mf = MappedFile(path, self.file_size, create=False)
            self.files.append(IndexFile(mf, self.slots, self.max_entries, new=False))

    @property
    def max_phys(self) -> int:
        """Commitlog offset of the newest indexed record (-1 if none): recovery re-indexes past it."""
        for f in reversed(self.files):
            if f.count > 1:
                return ENTRY.unpack_from(f.mm, f.entries_base + (f.count - 1) * ENTRY_SIZE)[1]
        return -1

    def _writable(self, now_ms: int) -> IndexFile:
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        if self.files:
            self.files[-1].write_header()
            self.files[-1].mf.flush()
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / _name_for(now_ms)
        while path.exists():
            now_ms += 1
            path = self.directory / _name_for(now_ms)
        f = IndexFile(MappedFile(path, self.file_size, create=True), self.slots, self.max_entries, new=True)
        self.files.append(f)
        return f

    def put_keys(self, hashes: list[int], phys: int, store_ts: int) -> None:
        """Index one record under each of ``hashes``."""
        self.put_many([(h, phys) for h in hashes], store_ts)

    def put_many(self, entries: list[tuple[int, int]], store_ts: int) -> None:
        """Index ``(hash, commitlog offset)`` pairs stored at ``store_ts``, in commitlog order."""
        f = self._writable(store_ts)
        done = f.put_many(entries, store_ts)
        while done < len(entries):
            f = self._writable(store_ts)
            done += f.put_many(entries[done:], store_ts)
        f.mf.wrote_pos = f.entries_base + f.count * ENTRY_SIZE
        f.write_header()

    def sync_header(self) -> None:
        if self.files:
            self.files[-1].write_header()

    def lookup(self, topic_key: bytes, begin_ts: int, end_ts: int, limit: int) -> list[int]:
        """Commitlog offsets for a key, newest first (hash matches only: verify the key)."""
        h = key_hash(topic_key)
        out: list[int] = []
        for f in reversed(self.files):
            if len(out) >= limit:
                break
            if f.count <= 1 or f.end_ts < begin_ts - 1000 or f.begin_ts > end_ts + 1000:
                continue
            f.lookup(h, begin_ts, end_ts, limit, out)
        return out

    def delete_below(self, min_phys: int) -> int:
        """Delete files whose every entry points below ``min_phys`` (the newest file stays)."""
        deleted = 0
        while len(self.files) > 1 and self.files[0].end_phys < min_phys:
            self.files.pop(0).mf.destroy()
            deleted += 1
        return deleted

    @property
    def last_ts(self) -> int:
        return self.files[-1].end_ts if self.files else 0

    def flush(self) -> int:
        """Sync the newest file; returns the store time its entries are durable up to."""
        if not self.files:
            return 0
        f = self.files[-1]
        ts = f.end_ts
        f.write_header()
        f.mf.wrote_pos = f.entries_base + f.count * ENTRY_SIZE
        f.mf.flush()
        return ts

    def close(self) -> None:
        for f in self.files:
            f.write_header()
            f.mf.close()

    def disk_bytes(self) -> int:
        return len(self.files) * self.file_size
