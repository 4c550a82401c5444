"""The commitlog: every record of every topic, appended to one sequence of mapped files.

Files are ``commitlog/<20-digit start offset>``, each ``commitlog_file_size`` bytes (1 GiB by
default); a record's commitlog (physical) offset is the file's start plus its position in it.
Records use the layout in :mod:`pymq.protocol.record`. A record never spans two files: when
the next record plus an 8-byte blank marker does not fit in the current file, the rest of
the file gets the blank marker ``[i32 bytes left in the file][u32 0xCBD43194]``
(:func:`pymq.protocol.record.blank_marker`) and writing continues at the start of the next
file. Past the last record of the newest file the bytes are zero.

This module writes and reads bytes; where each field of a record sits is known only to
:mod:`pymq.protocol.record`. What the records mean for consume queues and the index is
the dispatcher's business (:mod:`pymq.broker.store.dispatcher`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import accumulate
from pathlib import Path

from pymq.broker.store.mapped_file import MappedFile, store_error
from pymq.broker.store.mapped_file_queue import MappedFileQueue
from pymq.errors import StoreError
from pymq.protocol.record import BLANK_SIZE, blank_marker, stored_record_size
from pymq.protocol.record_batch import SCAN_BATCH, StoredRecord, StoredScan, patch_broker_blocks, store_record

BLANK_MIN = BLANK_SIZE

#: stored records of one file as replication hands them to the dispatcher: (file, delta, records),
#: each record ``(pos, size, topic_at, props_at, queue_id, queue_offset, store_ts)`` with
#: positions ``delta`` bytes before their place in the file
StoredRun = tuple[MappedFile, int, list[StoredRecord]]


class CommitLog:
    def __init__(self, directory: Path, file_size: int, *, pwrite: bool = False) -> None:
        self.mfq = MappedFileQueue(directory, file_size)
        self.mfq.warm = True
        self.file_size = file_size
        #: write records with pwrite (built in a scratch buffer) instead of through the mapping.
        #: SYNC_FLUSH turns it on: a page dirtied through a shared mapping costs its sync ~2.7x
        #: more on ext4 (benchmarks/dirty_path_bench.py); reads still go through the mapping,
        #: which sees the same page cache
        self.pwrite = pwrite
        self._scratch = bytearray(64 * 1024)

    @property
    def min_offset(self) -> int:
        return self.mfq.min_offset

    @property
    def max_offset(self) -> int:
        return self.mfq.max_offset

    def file_for_append(self, size: int) -> MappedFile:
        """The file the next record of ``size`` bytes goes to, rolling over if needed."""
        mf = self.mfq.writable_file(0)
        if mf.wrote_pos + size + BLANK_MIN > mf.size:
            free = mf.size - mf.wrote_pos
            if free >= BLANK_MIN:
                if mf.wrote_pos + BLANK_MIN > mf.reserved:
                    mf.reserve(mf.wrote_pos + BLANK_MIN)
                mf.mm[mf.wrote_pos : mf.wrote_pos + BLANK_MIN] = blank_marker(free)
            mf.wrote_pos = mf.size
            mf = self.mfq.writable_file(0)
        return mf

    # --- writing ----------------------------------------------------------------------------------------------

    def append(
        self,
        data: bytes,
        positions: list[int],
        sizes: list[int],
        queue_id: int,
        first_queue_offset: int,
        store_ts: int,
        store_host: bytes,
    ) -> list[int]:
        """Copy the validated records of a producer's batch and patch their broker blocks.

        ``positions``/``sizes`` say where the records are in ``data`` (see
        :func:`pymq.protocol.record_batch.split_batch`); they get queue offsets from
        ``first_queue_offset`` on. Returns their commitlog offsets. Adjacent records are
        copied with one memcpy (a "run") and patched after, so a crash in between leaves
        records that recovery refuses (their physical-offset field is not yet theirs). A
        record that does not fit in the current file (with room for the blank marker)
        rolls over to the next. Raises :class:`StoreError` if a file cannot be created;
        the caller undoes the batch.
        """
        mf = self.file_for_append(0)
        wpos = mf.wrote_pos
        count = len(positions)
        if not count:
            return []
        total = sum(sizes)
        first = positions[0]
        if wpos + total + BLANK_MIN <= mf.size and positions[-1] + sizes[-1] - first == total:
            # The common case: the whole batch is one run and fits in the current file.
            at = [wpos] if count == 1 else list(accumulate(sizes[:-1], initial=wpos))
            self._write_run(mf, data, first, at, queue_id, first_queue_offset, store_ts, store_host, total)
            mf.wrote_pos = wpos + total
            base = mf.file_from
            return [base + wpos] if count == 1 else list(accumulate(sizes[:-1], initial=base + wpos))
        return self._append_runs(mf, data, positions, sizes, queue_id, first_queue_offset, store_ts, store_host)

    def append_one(
        self, data: bytes, pos: int, size: int, queue_id: int, queue_offset: int, store_ts: int, store_host: bytes
    ) -> int:
        """:meth:`append` of one record (``data[pos : pos + size]``); returns its commitlog offset.

        Part of the single send's fast path (see ``Appender.put_single``).
        """
        files = self.mfq.files
        mf = files[-1] if files else None
        if mf is None or mf.wrote_pos + size + BLANK_MIN > mf.size:
            mf = self.file_for_append(size)  # the first file, or a roll-over
        wpos = mf.wrote_pos
        end = wpos + size
        if end > mf.reserved:
            mf.reserve(end)
        base = mf.file_from
        # Mapped: the copy lands before the broker block is patched (crash safety, see
        # append()); pwrite: the patched record lands in one system call.
        if self.pwrite:
            scratch = self._scratch_for(size)
            store_record(scratch, 0, data, pos, size, queue_id, queue_offset, base + wpos, store_ts, store_host)
            self._pwrite(mf, memoryview(scratch)[:size], wpos)
        else:
            store_record(mf.mm, wpos, data, pos, size, queue_id, queue_offset, base, store_ts, store_host)
        mf.wrote_pos = end
        return base + wpos

    def _append_runs(
        self,
        mf: MappedFile,
        data: bytes,
        positions: list[int],
        sizes: list[int],
        queue_id: int,
        qoff: int,
        store_ts: int,
        store_host: bytes,
    ) -> list[int]:
        """:meth:`append` for batches with gaps (refused records) or reaching past the file's end."""
        phys: list[int] = []
        wpos, fsize, base = mf.wrote_pos, mf.size, mf.file_from
        run_src = run_len = run_qoff = 0
        run_at: list[int] = []
        for pos, size in zip(positions, sizes, strict=True):
            if wpos + size + BLANK_MIN > fsize:
                if run_len:
                    self._write_run(mf, data, run_src, run_at, queue_id, run_qoff, store_ts, store_host, run_len)
                    run_len = 0
                mf.wrote_pos = wpos
                mf = self.file_for_append(size)
                wpos, fsize, base = mf.wrote_pos, mf.size, mf.file_from
            if run_len and pos != run_src + run_len:
                self._write_run(mf, data, run_src, run_at, queue_id, run_qoff, store_ts, store_host, run_len)
                run_len = 0
            if not run_len:
                run_src, run_qoff, run_at = pos, qoff, []
            run_len += size
            run_at.append(wpos)
            phys.append(base + wpos)
            qoff += 1
            wpos += size
        if run_len:
            self._write_run(mf, data, run_src, run_at, queue_id, run_qoff, store_ts, store_host, run_len)
        mf.wrote_pos = wpos
        return phys

    def _write_run(
        self,
        mf: MappedFile,
        data: bytes,
        src: int,
        at: list[int],
        queue_id: int,
        qoff: int,
        store_ts: int,
        store_host: bytes,
        length: int,
    ) -> None:
        """Copy ``length`` bytes of adjacent records to ``at[0]``, then patch each one's broker block.

        With :attr:`pwrite` they are patched in the scratch buffer and written in one pwrite.
        """
        dst = at[0]
        if dst + length > mf.reserved:
            mf.reserve(dst + length)
        if self.pwrite:
            scratch = self._scratch_for(length)
            scratch[:length] = memoryview(data)[src : src + length]
            rel = [0] if len(at) == 1 else [a - dst for a in at]
            patch_broker_blocks(scratch, rel, queue_id, qoff, mf.file_from + dst, store_ts, store_host)
            self._pwrite(mf, memoryview(scratch)[:length], dst)
            return
        mm = mf.mm
        mm[dst : dst + length] = memoryview(data)[src : src + length]
        patch_broker_blocks(mm, at, queue_id, qoff, mf.file_from, store_ts, store_host)

    def _scratch_for(self, size: int) -> bytearray:
        """The scratch buffer records are built in before their pwrite (grown to ``size`` if needed)."""
        if len(self._scratch) < size:
            self._scratch = bytearray(max(size, 2 * len(self._scratch)))
        return self._scratch

    @staticmethod
    def _pwrite(mf: MappedFile, data: memoryview, at: int) -> None:
        """Write ``data`` at ``at`` of ``mf``'s file, whole (the caller undoes the put on StoreError)."""
        n = len(data)
        try:
            done = os.pwrite(mf.fd, data, at)
            while done < n:  # (a regular file writes everything or fails; stay correct if not)
                done += os.pwrite(mf.fd, data[done:], at + done)
        except OSError as exc:
            raise store_error(exc, f"writing {mf.path} at {at}") from exc

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> list[StoredRun]:
        """Append bytes already in commitlog layout (a master's, for a slave) at exactly ``offset``.

        ``offset`` must be the commitlog's end (an empty commitlog accepts a file boundary).
        ``data`` must be whole stored records, each with its broker block written for
        this very position (physical offset = where it lands) and its body CRC right; a
        blank marker must fill its file to the end, and the next bytes then start the next
        file. Everything is checked before a byte is written, so a refused call changes
        nothing (:class:`StoreError`). Returns the records written, one run per file, for
        the dispatcher.
        """
        end = self.max_offset
        if self.mfq.files and offset != end:
            raise StoreError(f"replicated data at {offset} does not continue the commitlog, which ends at {end}")
        if not self.mfq.files and offset % self.file_size:
            raise StoreError(f"an empty commitlog starts at a file boundary, not at {offset}")
        # Check: split the data at file boundaries and verify each piece (positions in the piece).
        pieces: list[tuple[int, int, int, list[StoredRecord]]] = []  # (file start, pos in file, bytes, records)
        n = len(data)
        with memoryview(data) as view:
            at, phys = 0, offset
            while at < n:
                file_from = phys - phys % self.file_size
                fpos = phys - file_from
                length = min(n - at, self.file_size - fpos)
                with view[at : at + length] as piece:
                    pieces.append((file_from, fpos, length, self._checked_piece(piece, phys, fpos)))
                at += length
                phys += length
            # Write.
            runs: list[StoredRun] = []
            at = 0
            for file_from, fpos, length, records in pieces:
                mf = self.mfq.writable_file(file_from)
                if mf.file_from != file_from or mf.wrote_pos != fpos:
                    raise StoreError(f"commitlog file for {file_from + fpos} is not at the expected end")
                if fpos + length > mf.reserved:
                    mf.reserve(fpos + length)
                mf.mm[fpos : fpos + length] = view[at : at + length]
                mf.wrote_pos = fpos + length
                runs.append((mf, fpos, records))
                at += length
        return runs

    def _checked_piece(self, piece: memoryview, phys: int, fpos: int) -> list[StoredRecord]:
        """The records of ``piece`` (replicated bytes for file position ``fpos``, physical offset
        ``phys``); raises StoreError unless it is whole records, then perhaps a blank marker
        filling the file."""
        length = len(piece)
        scan = StoredScan(piece, 0, length, phys, check_crc=True)
        records: list[StoredRecord] = []
        while True:
            batch = scan.batch()
            records += batch
            if len(batch) < SCAN_BATCH:
                break
        used = scan.pos
        if used < length:
            blank = scan.blank_size()
            if not scan.clean or not blank or fpos + used + blank != self.file_size or used + blank != length:
                raise StoreError(f"replicated data at {phys + used} is not a whole record or a blank marker")
        return records

    # --- reading ----------------------------------------------------------------------------------------------

    def view(self, phys: int, size: int) -> memoryview | None:
        """``size`` bytes at ``phys`` as one view, if they are written and in one file."""
        mf = self.mfq.find(phys)
        if mf is None:
            return None
        pos = phys - mf.file_from
        if pos + size > mf.wrote_pos:
            return None
        return memoryview(mf.mm)[pos : pos + size]

    def read(self, offset: int, size: int) -> list[memoryview]:
        """The written bytes ``[offset, offset + size)``, as one view per file they span.

        Stops short at the end of the data (or of a deleted region: an offset below the
        first file gives nothing). Replication ships these bytes to :meth:`append_raw`.
        """
        out: list[memoryview] = []
        end = min(offset + size, self.max_offset)
        while offset < end:
            mf = self.mfq.find(offset)
            if mf is None:
                break
            pos = offset - mf.file_from
            stop = min(mf.wrote_pos, pos + end - offset)
            if stop <= pos:
                break
            out.append(memoryview(mf.mm)[pos:stop])
            offset += stop - pos
        return out

    def read_record(self, phys: int) -> memoryview | None:
        """The whole record at ``phys``, or None if no record starts there.

        The record's own physical-offset field must equal ``phys``, so an offset pointing
        into the middle of a record (a forged or stale message id) finds nothing.
        """
        mf = self.mfq.find(phys)
        if mf is None:
            return None
        pos = phys - mf.file_from
        size = stored_record_size(mf.mm, pos, mf.wrote_pos, phys) if pos >= 0 else 0
        return memoryview(mf.mm)[pos : pos + size] if size else None

    def scan(self, start: int, check_crc: bool) -> Iterator[tuple[MappedFile, int, int, int, int, int, int, int]]:
        """Yield ``(file, pos, size, topic_at, props_at, queue_id, queue_offset, store_ts)`` per valid record.

        ``start`` is a record boundary; positions are in the file (the topic is
        ``mm[topic_at : props_at - 2]``, the properties ``mm[props_at : pos + size]``).
        Records are verified by :class:`pymq.protocol.record_batch.StoredScan`. Stops at the
        first invalid record; the caller reads :attr:`scan_end` afterwards. Blank markers
        move to the next file.
        """
        self.scan_end = start
        mf = self.mfq.find(start)
        if mf is None:
            return
        files = self.mfq.files
        idx = files.index(mf)
        pos = start - mf.file_from
        while True:
            base = mf.file_from
            records = StoredScan(mf.mm, pos, mf.size, base, check_crc)
            for rec in records:
                yield (mf, *rec)
                self.scan_end = base + rec[0] + rec[1]
            if not records.clean:
                self.scan_end = base + records.pos
                return
            # A blank marker, or the exact end of the file: the data goes on in the next file.
            idx += 1
            if idx >= len(files):
                self.scan_end = base + mf.size
                return
            mf = files[idx]
            pos = 0
            self.scan_end = mf.file_from

    def flush(self) -> int:
        return self.mfq.flush()

    def close(self) -> None:
        self.mfq.close()

    scan_end: int = 0
