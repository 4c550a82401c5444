"""Index files: a hash index from ``topic#key`` to commitlog offsets, for lookups by key.

One file (``index/<yyyyMMddHHmmssSSS>``, named by local creation time) holds, in
**little-endian** byte order (unlike the commitlog and consume queues, so that the slot
table can be used as a native int32 array through a memoryview on the usual hosts)::

    header   40 bytes: begin_ts i64 | end_ts i64 | begin_phys i64 | end_phys i64 |
                       hash_slot_count i32 | index_count i32
    slots    hash_slot_count x i32: the newest entry number for that slot (0 = empty)
    entries  max_entries x 20 bytes: key_hash u32 | phys i64 | time_diff i32 | prev i32

Entry ``n`` sits at byte ``40 + 4 * hash_slot_count + 20 * n``. ``time_diff`` is seconds
since ``begin_ts``; ``prev`` chains entries of the same slot from newest to oldest (0
ends the chain). Entry 0 is never used, so ``index_count`` starts at 1 and the file is
full when it reaches ``max_entries``. The hash is crc32 of the UTF-8 ``topic#key`` and
the slot is ``hash % hash_slot_count``: different keys can share a slot or even a hash,
so the store checks the key in the record itself.

Crash safety: a batch writes each entry before pointing its slot at it, and the header
(with the new ``index_count``) after the whole batch. Entries found past the count at load
time are undone (:meth:`IndexFile.rollback_uncounted`).
"""

from __future__ import annotations

import struct
import sys
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from pymq.broker.store.index_next import PREPARE_FRACTION, NextIndexFile
from pymq.broker.store.mapped_file import MappedFile
from pymq.broker.store.mapped_file_queue import remove_leftovers
from pymq.errors import StoreError
from pymq.logs import get_logger
from pymq.protocol import record as _record

if TYPE_CHECKING:
    from pymq.broker.store.file_maker import FileMaker

log = get_logger("broker.store.index")

HEADER = struct.Struct("<qqqqii")
HEADER_SIZE = HEADER.size  # 40
ENTRY = struct.Struct("<Iqii")
ENTRY_SIZE = ENTRY.size  # 20
_SLOT = struct.Struct("<i")
_ZERO_ENTRY = bytes(ENTRY_SIZE)
_NATIVE_SLOTS = sys.byteorder == "little"

# The C accelerator (pymq._speedups, loaded by protocol/accelerator.py; record.speedups) writes entries in put_many;
# it must have been built for this layout.
if (
    _record.speedups is not None
    and {
        "ENTRY": ENTRY.format,
        "ENTRY_SIZE": ENTRY_SIZE,
        "SLOT": _SLOT.format,
    }
    != _record.speedups.INDEX_LAYOUT
):
    raise ImportError("pymq._speedups was built for another index layout: rebuild it (pip install -e .)")


def key_hash(topic_key: bytes) -> int:
    return zlib.crc32(topic_key)


def index_file_size(slots: int, entries: int) -> int:
    return HEADER_SIZE + slots * 4 + entries * ENTRY_SIZE


def _name_for(ts_ms: int) -> str:
    t = time.localtime(ts_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ts_ms % 1000:03d}"


class _StructSlots:
    """Slot access through ``struct`` (big-endian hosts, where a native view would be wrong)."""

    __slots__ = ("mm",)

    def __init__(self, mm: object) -> None:
        self.mm = mm

    def __getitem__(self, i: int) -> int:
        value: int = _SLOT.unpack_from(self.mm, HEADER_SIZE + 4 * i)[0]  # type: ignore[arg-type]
        return value

    def __setitem__(self, i: int, v: int) -> None:
        _SLOT.pack_into(self.mm, HEADER_SIZE + 4 * i, v)  # type: ignore[arg-type]

    def release(self) -> None:
        pass


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
        "slot_view",
        "slots",
    )

    def __init__(self, mf: MappedFile, slots: int, max_entries: int, *, new: bool) -> None:
        self.mf = mf
        self.mm = mf.mm
        self.slots = slots
        self.max_entries = max_entries
        self.entries_base = HEADER_SIZE + slots * 4
        self.slot_view = (
            memoryview(mf.mm)[HEADER_SIZE : self.entries_base].cast("i") if _NATIVE_SLOTS else _StructSlots(mf.mm)
        )
        if new:
            self.begin_ts = self.end_ts = self.begin_phys = self.end_phys = 0
            self.count = 1
            self.write_header()
        else:
            (self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, stored_slots, self.count) = HEADER.unpack_from(
                self.mm, 0
            )
            if stored_slots != slots:
                self.slot_view.release()
                raise StoreError(f"{mf.path} has {stored_slots} hash slots, configured {slots}")
            self.count = min(max(1, self.count), max_entries)
        mf.wrote_pos = mf.flushed_pos = self.entries_base + self.count * ENTRY_SIZE
        mf.ranged_sync = False  # slots and header change anywhere in the file: sync all of it

    @property
    def is_full(self) -> bool:
        return self.count >= self.max_entries

    def write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slots, self.count)

    def rollback_uncounted(self) -> int:
        """Undo entries written past the header's count; returns how many.

        A batch writes each entry before pointing its slot at it and the header's count
        last, so after a crash mid-batch the uncounted entries hold, in ``prev``, the slot
        values they replaced: restoring those newest-first leaves no slot pointing past the
        count, and every chain intact.
        """
        mm = self.mm
        base = self.entries_base
        sv = self.slot_view
        top = self.count
        while top < self.max_entries and mm[base + top * ENTRY_SIZE : base + (top + 1) * ENTRY_SIZE] != (_ZERO_ENTRY):
            top += 1
        for n in range(top - 1, self.count - 1, -1):
            h, _, _, prev = ENTRY.unpack_from(mm, base + n * ENTRY_SIZE)
            slot = h % self.slots
            if sv[slot] == n:
                sv[slot] = prev if 0 < prev < n else 0
            mm[base + n * ENTRY_SIZE : base + (n + 1) * ENTRY_SIZE] = _ZERO_ENTRY
        return top - self.count

    def put_many(self, entries: list[tuple[int, int]], store_ts: int) -> int:
        """Add ``(hash, commitlog offset)`` entries of one store time; returns how many fit.

        Each entry is written before its slot points at it; the caller writes the header
        (with the new count) after the whole batch (see :meth:`rollback_uncounted`).
        """
        mm = self.mm
        slots = self.slots
        sv = self.slot_view
        count = self.count
        room = self.max_entries - count
        if room <= 0:
            return 0
        todo = entries if len(entries) <= room else entries[:room]
        if self.begin_ts == 0:
            self.begin_ts = store_ts
            self.begin_phys = todo[0][1]
        tdiff = (store_ts - self.begin_ts) // 1000
        speedups = _record.speedups
        if speedups is not None:
            new_count = speedups.index_put(mm, self.entries_base, HEADER_SIZE, slots, count, todo, tdiff)
            if new_count is not NotImplemented:
                self.count = new_count
                self.end_ts = store_ts
                self.end_phys = todo[-1][1]
                return len(todo)
        pack_entry = ENTRY.pack_into
        pos = self.entries_base + count * ENTRY_SIZE
        # Slots always hold entry numbers below the count (load rolls back any beyond it); a
        # corrupt one could only make ``prev`` point forward, which lookups treat as the end.
        for h, phys in todo:
            slot = h % slots
            pack_entry(mm, pos, h, phys, tdiff, sv[slot])
            sv[slot] = count
            count += 1
            pos += 20
        self.count = count
        self.end_ts = store_ts
        self.end_phys = todo[-1][1]
        return len(todo)

    def lookup(self, h: int, begin_ts: int, end_ts: int, limit: int, out: list[int]) -> None:
        """Append to ``out`` the commitlog offsets of entries with hash ``h`` stored in [begin_ts, end_ts]."""
        mm = self.mm
        cur = self.slot_view[h % self.slots]
        count = self.count
        base = self.entries_base
        file_begin = self.begin_ts
        begin_ts -= 1000  # time_diff has second precision: widen the window by a second on each side
        end_ts += 1000
        unpack = ENTRY.unpack_from
        while 0 < cur < count and len(out) < limit:
            eh, phys, tdiff, prev = unpack(mm, base + cur * ENTRY_SIZE)
            if eh == h and begin_ts <= file_begin + tdiff * 1000 <= end_ts:
                out.append(phys)
            if prev >= cur:
                break
            cur = prev

    def truncate_from(self, phys: int) -> int:
        """Undo the newest entries pointing at ``phys`` or later (a store truncated there); returns how many.

        Entries are written in commitlog order, so they are the file's last ones: each is
        undone newest first like an uncounted one (its slot gets back the value it replaced).
        """
        mm = self.mm
        base = self.entries_base
        sv = self.slot_view
        n = self.count - 1
        while n > 0:
            h, at, _, prev = ENTRY.unpack_from(mm, base + n * ENTRY_SIZE)
            if at < phys:
                break
            slot = h % self.slots
            if sv[slot] == n:
                sv[slot] = prev if 0 < prev < n else 0
            mm[base + n * ENTRY_SIZE : base + (n + 1) * ENTRY_SIZE] = _ZERO_ENTRY
            n -= 1
        dropped = self.count - 1 - n
        if dropped:
            self.count = n + 1
            self.end_phys = ENTRY.unpack_from(mm, base + n * ENTRY_SIZE)[1] if n > 0 else 0
            self.write_header()
            self.mf.wrote_pos = base + self.count * ENTRY_SIZE
            self.mf.flushed_pos = min(self.mf.flushed_pos, self.mf.wrote_pos)
        return dropped

    def tail_hashes(self) -> tuple[int, set[int]]:
        """The newest entry's commitlog offset and the hashes indexed for it ((-1, set()) if empty)."""
        if self.count <= 1:
            return -1, set()
        base = self.entries_base
        n = self.count - 1
        last_phys = ENTRY.unpack_from(self.mm, base + n * ENTRY_SIZE)[1]
        hashes = set()
        while n > 0:
            h, phys, _, _ = ENTRY.unpack_from(self.mm, base + n * ENTRY_SIZE)
            if phys != last_phys:
                break
            hashes.add(h)
            n -= 1
        return last_phys, hashes

    def close(self) -> None:
        self.slot_view.release()
        self.mf.close()

    def destroy(self) -> None:
        self.slot_view.release()
        self.mf.destroy()


class IndexService:
    """The index files of a store: the newest is written, all are searched newest first."""

    def __init__(self, directory: Path, slots: int, max_entries: int) -> None:
        self.directory = directory
        self.slots = slots
        self.max_entries = max_entries
        self.file_size = index_file_size(slots, max_entries)
        self.files: list[IndexFile] = []
        #: store time of the newest entry whose header (count) is written
        self.header_ts = 0
        #: makes the next file ahead of the roll (the store's FileMaker; None: made at the roll)
        self.maker: FileMaker | None = None
        #: the next file, queued to the maker (see :mod:`pymq.broker.store.index_next`)
        self.next: NextIndexFile | None = None
        #: put_many looks at rolling (and preparing the next file) once the newest holds this many entries
        self.roll_at = max_entries
        #: files rolled to that were made ahead / made on the writer's thread (stats, tests)
        self.made_ahead = 0
        self.made_on_writer = 0

    def make_ahead(self, maker: FileMaker, now_ms: int) -> None:
        """Have the next files made by ``maker`` from now on (the first one at once if there is none)."""
        self.maker = maker
        if self.files:
            self.roll_at = self._prepare_at()
        elif self.next is None:
            self._prepare(now_ms)

    def _prepare_at(self) -> int:
        return max(1, int(self.max_entries * PREPARE_FRACTION))

    def _prepare(self, now_ms: int) -> None:
        """Queue the next file to the maker, named later than the newest file (writer's thread, no syscall)."""
        assert self.maker is not None
        name = _name_for(now_ms)
        if self.files and name <= self.files[-1].mf.path.name:
            name = f"{int(self.files[-1].mf.path.name) + 1:0{len(name)}d}"  # the clock went back
        self.next = NextIndexFile(self.directory / name, self.file_size)
        self.maker.submit(self.next)

    def load(self) -> int:
        """Map the index files; returns how many uncounted entries were rolled back."""
        if not self.directory.exists():
            return 0
        rolled_back = 0
        remove_leftovers(self.directory)
        for path in sorted(p for p in self.directory.iterdir() if p.name.isdigit()):
            size = path.stat().st_size
            if size != self.file_size:
                # A torn creation, or another configuration: the index can be rebuilt, so
                # the file goes (re-dispatch after an abnormal restart re-indexes the tail).
                log.warning("index_file_dropped", path=str(path), size=size, expected=self.file_size)
                path.unlink()
                continue
            with path.open("rb") as fh:
                header = fh.read(HEADER.size)
            if not any(header):
                # Created, but killed before its header was written: it holds no entry.
                log.warning("index_file_dropped", path=str(path), reason="header never written")
                path.unlink()
                continue
            f = IndexFile(MappedFile(path, self.file_size, create=False), self.slots, self.max_entries, new=False)
            rolled_back += f.rollback_uncounted()
            self.files.append(f)
        if self.files:
            self.header_ts = self.files[-1].end_ts
        return rolled_back

    def tail(self) -> tuple[int, set[int]]:
        """Commitlog offset of the newest indexed record (-1 if none) and the hashes it is indexed under.

        Recovery re-indexes records past it, and the missing keys of that record itself
        (a batch can end one file and continue in the next).
        """
        for f in reversed(self.files):
            if f.count > 1:
                return f.tail_hashes()
        return -1, set()

    def _writable(self, now_ms: int) -> IndexFile:
        if self.files and not self.files[-1].is_full:
            # roll_at reached: have the next file made ahead, off the writer's thread.
            self.roll_at = self.max_entries
            if self.next is None and self.maker is not None:
                self._prepare(now_ms)
            return self.files[-1]
        if self.files:
            # The full file is synced by the next flush (see flush()), not on the writer's thread.
            full = self.files[-1]
            full.write_header()
            full.mf.wrote_pos = full.mf.size
        nxt, self.next = self.next, None
        if nxt is not None:
            mf, ahead = nxt.take(self.maker)  # made ahead: no file-system call here
        else:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / _name_for(now_ms)
            while path.exists():
                now_ms += 1
                path = self.directory / _name_for(now_ms)
            mf, ahead = MappedFile(path, self.file_size, create=True), False
        if ahead:
            self.made_ahead += 1
        else:
            self.made_on_writer += 1
        f = IndexFile(mf, self.slots, self.max_entries, new=True)  # writes its header: a real index file now
        self.files.append(f)
        self.roll_at = self._prepare_at() if self.maker is not None else self.max_entries
        return f

    def put_many(self, entries: list[tuple[int, int]], store_ts: int) -> None:
        """Index ``(hash, commitlog offset)`` pairs stored at ``store_ts``, in commitlog order."""
        files = self.files
        f = files[-1] if files else None
        if f is None or f.count >= self.roll_at:  # no file yet, or the last one is (nearly) full
            f = self._writable(store_ts)
        done = f.put_many(entries, store_ts)
        while done < len(entries):
            f = self._writable(store_ts)
            done += f.put_many(entries[done:], store_ts)
        f.write_header()
        f.mf.wrote_pos = f.entries_base + f.count * ENTRY_SIZE
        self.header_ts = store_ts

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

    def truncate_from(self, phys: int) -> int:
        """Drop the entries pointing at commitlog offset ``phys`` or later (newest files first)."""
        dropped = 0
        while self.files:
            f = self.files[-1]
            dropped += f.truncate_from(phys)
            if f.count > 1 or len(self.files) == 1:
                break
            self.files.pop().destroy()  # emptied: a later put starts a new file
        if self.files:
            self.header_ts = min(self.header_ts, self.files[-1].end_ts)
        return dropped

    def delete_below(self, min_phys: int) -> int:
        """Delete files whose every entry points below ``min_phys`` (the newest file stays)."""
        deleted = 0
        while len(self.files) > 1 and self.files[0].end_phys < min_phys:
            self.files.pop(0).destroy()
            deleted += 1
        return deleted

    def flush(self) -> int:
        """Sync the newest file; returns the store time its entries are durable up to.

        Runs on the flush thread: it only syncs. The writer keeps the header current.
        """
        ts = self.header_ts
        # Only the newest files can hold unsynced entries (the writer rolls over, never back).
        for f in reversed(list(self.files)):
            if f.mf.wrote_pos <= f.mf.flushed_pos:
                break
            f.mf.flush()
        return ts

    def close(self) -> None:
        for f in self.files:
            f.write_header()
            f.close()
        nxt, self.next = self.next, None
        if nxt is not None:
            nxt.discard(self.maker)  # made ahead but not needed: not left for the next load to drop

    def abandon(self) -> None:
        """Unmap the files without writing headers (what a crash leaves)."""
        for f in self.files:
            f.close()
        nxt, self.next = self.next, None
        if nxt is not None:
            nxt.abandon()

    def disk_bytes(self) -> int:
        nxt = self.next
        return (len(self.files) + (nxt is not None and nxt.made is not None)) * self.file_size
