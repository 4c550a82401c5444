"""Consume-queue files for many queues: mapped lazily, without a descriptor, at most ``cap`` at a time.

A broker with 10,000 queues has at least 10,000 consume-queue files. Python's ``mmap.mmap``
keeps a duplicate of the file descriptor for the mapping's life, and pymq used to keep its
own too: two descriptors per file, so 10,000 queues ran out of descriptors (EMFILE). A
mapping does not need its descriptor, so :class:`PooledMappedFile` maps with ``mmap(2)``
through ctypes and closes the descriptor at once; the mapping is exposed as a writable
``memoryview`` whose owner unmaps it when the last view of it is gone (a pull's slices keep
it alive, so unmapping can never pull memory from under a reader).

:class:`MapPool` bounds the mappings (``consume_queue_max_mapped_files``): a file is mapped
on first use, and past the cap the least recently used files that hold no unsynced data are
unmapped (files with unsynced data stay until the logics flusher has synced them). A file
read again is mapped again. Off Linux (no ctypes ``mmap``) the files fall back to
``mmap.mmap`` with one descriptor each, and the cap is lowered to fit the descriptor limit.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymq.broker.store import file_maker, mapped_file
from pymq.broker.store.file_maker import FileMaker
from pymq.broker.store.mapped_file import MappedFile
from pymq.errors import StoreError


def _libc_mmap() -> tuple[Any, Any] | None:
    if os.uname().sysname != "Linux":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mmap_fn, munmap_fn = libc.mmap, libc.munmap
    except (OSError, AttributeError):
        return None
    mmap_fn.restype = ctypes.c_void_p
    mmap_fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    munmap_fn.restype = ctypes.c_int
    munmap_fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return mmap_fn, munmap_fn


_LIBC = _libc_mmap()
#: mappings without a descriptor are possible here (and msync by address, which flushing needs)
FD_LESS = _LIBC is not None and mapped_file._msync is not None
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Mapping:
    """Owns one mapping: unmapped when the buffer holding it (and so every view of it) is gone."""

    __slots__ = ("address", "size")

    def __init__(self, address: int, size: int) -> None:
        self.address = address
        self.size = size

    def __del__(self) -> None:
        if _LIBC is not None and self.address:
            _LIBC[1](self.address, self.size)
            self.address = 0


_BUFFER_TYPES: dict[int, Any] = {}


def _buffer_type(size: int) -> Any:
    """A ctypes byte-array type of ``size`` whose instances can carry their :class:`_Mapping`."""
    t = _BUFFER_TYPES.get(size)
    if t is None:
        t = _BUFFER_TYPES[size] = type(f"_Pages{size}", (ctypes.Array,), {"_type_": ctypes.c_char, "_length_": size})
    return t


def map_fd(fd: int, size: int, path: Path) -> tuple[memoryview, int]:
    """Map ``size`` bytes of ``fd`` shared and writable; the caller may close ``fd`` right after."""
    assert _LIBC is not None
    address = _LIBC[0](None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        err = ctypes.get_errno()
        raise StoreError(f"cannot map {path}: {os.strerror(err or errno.ENOMEM)}")
    owner = _Mapping(address, size)
    buf = _buffer_type(size).from_address(address)
    buf.owner = owner  # lives as long as the buffer, which the views keep alive
    return memoryview(buf).cast("B"), address


class PooledMappedFile(MappedFile):
    """A consume-queue file: mapped on first use (:meth:`view`), unmappable by its :class:`MapPool`.

    A new file may start *pending* (see :mod:`pymq.broker.store.file_maker`): not on disk
    yet, its bytes ``[0, wrote_pos)`` held in ``pending`` until the maker thread adopts it.
    """

    __slots__ = ("made", "making", "pending", "pool")

    def __init__(self, path: Path, size: int, *, create: bool, lazy: bool = False, pool: MapPool) -> None:
        self.pool = pool
        self.mm = None  # type: ignore[assignment]  # not mapped (yet)
        #: the entries written while the file is being made (None: not pending)
        self.pending: bytearray | None = None
        #: the maker's state for this file (file_maker.QUEUED ...; 0: not with the maker)
        self.making = 0
        #: the mapping the maker made, until adopted
        self.made: tuple[memoryview, int] | None = None
        maker = pool.maker
        if create and maker is not None:
            # (create=False: the check that the file does not exist yet is the maker's, off the
            # writer's thread; a lookup in a directory the maker is adding to waits for it)
            super().__init__(path, size, create=False, lazy=True)
            self.pending = bytearray()
            pool.pending.add(self)
            maker.submit(self)
        else:
            super().__init__(path, size, create=create, lazy=lazy)

    def _map(self, create: bool) -> None:
        if not FD_LESS:
            super()._map(create)
        else:
            fd = self._open(create)
            try:
                mm, self.address = map_fd(fd, self.size, self.path)
            except BaseException:
                if create:
                    self.path.unlink(missing_ok=True)
                raise
            finally:
                os.close(fd)  # the mapping does not need it
            self.mm = mm  # type: ignore[assignment]  # a writable memoryview: the slicing an mmap offers
        self.pool.add(self)

    def view(self) -> mmap.mmap:
        mm = self.mm
        if mm is None:
            if self.closed:
                raise StoreError(f"{self.path} is closed")
            if self.pending is not None:
                self.make_now()
            else:
                self._map(False)
            return self.mm
        self.pool.touch(self)
        return mm

    # A pending file (being made on the maker thread) is only its buffer: truncation trims or
    # drops it in memory and never creates the file (which could fail halfway through an undo).

    def data_bytes(self) -> int:
        pending = self.pending
        return super().data_bytes() if pending is None else mapped_file.data_extent(pending, 0, len(pending))  # type: ignore[arg-type]

    def trim(self, end: int) -> int:
        pending = self.pending
        if pending is None:
            return super().trim(end)
        dropped = mapped_file.data_extent(pending, end, len(pending)) if end < len(pending) else 0  # type: ignore[arg-type]
        del pending[end:]
        self.wrote_pos = end
        self.flushed_pos = min(self.flushed_pos, end)
        return dropped

    def buffer(self) -> mmap.mmap | bytearray:
        """What appending and reading use: the pending buffer while the file is made, else :meth:`view`."""
        pending = self.pending
        if pending is not None:
            return pending
        mm = self.mm
        if mm is None:
            return self.view()
        self.pool._lru.move_to_end(self)  # view()'s touch, inlined: every consume-queue append and read comes here
        return mm

    # --- made off the writer's thread (file_maker) -----------------------------------------------------

    def create_mapping(self) -> tuple[memoryview, int]:
        """Create the file (its directory too), map it and prefault its first page; no store lock needed."""
        if self.path.exists():
            raise StoreError(f"cannot create {self.path}: it exists")
        fd = self._open(True)
        try:
            mm, address = map_fd(fd, self.size, self.path)
        except BaseException:
            self.path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        mapped_file.populate(address, min(self.size, mapped_file.PAGE_SIZE))
        return mm, address

    def adopt(self) -> None:
        """Move the pending entries into the made mapping and use it from now on (under the store lock)."""
        made, pending = self.made, self.pending
        if made is None or pending is None or self.closed:
            return
        mm, address = made
        self.made = None
        mm[: len(pending)] = pending
        self.address = address
        self.mm = mm  # type: ignore[assignment]
        self.pending = None  # (after mm: a flusher that sees no pending sees the mapping)
        self.making = 0
        self.pool.pending.discard(self)
        self.pool.add(self)

    def make_now(self) -> None:
        """Make and adopt a pending file on the caller's thread (holding the store lock).

        The same queue's earlier pending files are made first: a queue's files reach the disk
        in order (see :mod:`pymq.broker.store.file_maker`).
        """
        queue_dir, name = self.path.parent, self.path.name
        earlier = sorted(
            (mf for mf in self.pool.pending if mf.path.parent == queue_dir and mf.path.name < name),
            key=lambda mf: mf.path.name,
        )
        for mf in [*earlier, self]:
            if mf.pending is None:
                continue  # adopted meanwhile
            maker = self.pool.maker_thread
            if maker is not None:
                maker.claim(mf)  # waits if the thread is making it right now
            if mf.made is None:
                mf.made = mf.create_mapping()
            mf.adopt()

    def _cancel(self) -> None:
        """Closing a pending file: its buffered entries are dropped (what a crash would lose)."""
        maker = self.pool.maker_thread
        if maker is not None:
            with maker.cond:
                while self.making == file_maker.MAKING:
                    maker.cond.wait()
                self.making = file_maker.CANCELLED
        self.made = None  # (the mapping goes with its last reference; the file stays, empty)
        self.pending = None
        self.pool.pending.discard(self)

    @property
    def mapped(self) -> bool:
        return self.mm is not None

    def unmap(self) -> None:
        """Drop the mapping (the pool's eviction; only files without unsynced data)."""
        mm = self.mm
        if mm is None:
            return
        self.mm = None  # type: ignore[assignment]
        self.address = 0
        if self.fd >= 0:  # the descriptor-holding fallback
            try:
                mm.close()
            except BufferError:
                pass  # a reader still holds a view: the mapping goes with it
            os.close(self.fd)
            self.fd = -1

    def flush(self) -> int:
        if self.pending is not None:
            return self.flushed_pos  # not on disk yet (the logics flush holds its checkpoint back)
        target = self.wrote_pos
        if target > self.flushed_pos and not self.closed:
            mm = self.mm  # holds the mapping while it is synced
            if mm is None:
                raise StoreError(f"{self.path} was unmapped with unsynced data")
            if self.fd >= 0:
                return super().flush()
            start = self.flushed_pos - self.flushed_pos % mapped_file.PAGE_SIZE
            if mapped_file._msync(self.address + start, target - start, mapped_file._MS_SYNC) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"msync {self.path}: {os.strerror(err or errno.EIO)}")
            self.flushed_pos = target
            del mm
        return self.flushed_pos

    def sync_all(self) -> None:
        mm = self.mm
        if mm is None or self.closed:
            return
        if self.fd >= 0:
            os.fdatasync(self.fd)
        elif mapped_file._msync(self.address, self.size, mapped_file._MS_SYNC) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"msync {self.path}: {os.strerror(err or errno.EIO)}")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.pending is not None:
            self._cancel()
        self.pool.forget(self)
        self.unmap()

    def __repr__(self) -> str:
        state = "pending" if self.pending is not None else "mapped" if self.mm is not None else "unmapped"
        return f"<PooledMappedFile {self.path.name} wrote={self.wrote_pos}/{self.size} {state}>"


class MapPool:
    """The mapped consume-queue files, least recently used first; at most ``cap`` stay mapped.

    Used from the store's writer/reader side (under the store lock); the logics flusher only
    syncs files, and never unmaps one.
    """

    def __init__(self, cap: int) -> None:
        if not FD_LESS:
            # One descriptor per mapped file here: leave room for sockets and the other files.
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            if soft != resource.RLIM_INFINITY:
                cap = min(cap, max(16, soft // 4))
        self.cap = max(1, cap)
        self._lru: OrderedDict[PooledMappedFile, None] = OrderedDict()
        #: makes new files off the writer's thread while set (see file_maker; None: made at once)
        self.maker: FileMaker | None = None
        #: the maker thread, kept after it stopped so that pending files can still be claimed
        self.maker_thread: FileMaker | None = None
        #: files not on disk yet
        self.pending: set[PooledMappedFile] = set()
        #: files mapped / unmapped by the pool so far (stats, tests)
        self.maps = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    def new_file(self, path: Path, size: int, *, create: bool, lazy: bool = False) -> PooledMappedFile:
        return PooledMappedFile(path, size, create=create, lazy=lazy, pool=self)

    def start_maker(
        self,
        store_lock: threading.RLock,
        *,
        max_files: int = 0,
        max_bytes: int = 0,
        on_backlog: Callable[[str | None], None] | None = None,
    ) -> None:
        """Make new files on a thread from now on (Linux: the maps need no descriptor).

        ``on_backlog(reason)``: past ``max_files`` waiting or ``max_bytes`` buffered (None:
        back under half of both); see :mod:`pymq.broker.store.file_maker`.
        """
        if FD_LESS:
            self.maker = self.maker_thread = FileMaker(
                store_lock, max_files=max_files, max_bytes=max_bytes, on_backlog=on_backlog
            )
            self.maker.start()

    def stop_maker(self) -> None:
        """Stop making files on the thread; files still pending stay so until :meth:`settle`."""
        maker, self.maker = self.maker, None
        if maker is not None:
            maker.stop()

    def settle(self) -> int:
        """Make every pending file now, on the caller's thread (holding the store lock); returns how many."""
        files = sorted(self.pending, key=lambda mf: mf.path)
        for mf in files:
            mf.make_now()
        return len(files)

    def add(self, mf: PooledMappedFile) -> None:
        self._lru[mf] = None
        self.maps += 1
        if len(self._lru) > self.cap:
            self._evict(len(self._lru) - self.cap, mf)

    def touch(self, mf: PooledMappedFile) -> None:
        self._lru.move_to_end(mf)

    def forget(self, mf: PooledMappedFile) -> None:
        self._lru.pop(mf, None)

    def _evict(self, count: int, keep: PooledMappedFile) -> None:
        lru = self._lru
        # Files with unsynced data are skipped (moved to the back); look at a bounded number.
        tries = min(len(lru), count + 64)
        while count > 0 and tries > 0:
            tries -= 1
            mf = next(iter(lru))
            if mf is keep or mf.wrote_pos > mf.flushed_pos:
                lru.move_to_end(mf)
                continue
            del lru[mf]
            mf.unmap()
            self.evictions += 1
            count -= 1
