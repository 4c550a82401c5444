"""The write path's disk-full guard: when the store refuses writes because its disk is full.

Cleanup passes (every 10 s, :mod:`pymq.broker.store.cleanup`) measure disk use and alone
decide when writes resume. Between two passes the guard turns writes off as soon as:

* a put sees the disk above ``disk_full_ratio``: it measures (one ``statvfs``, never waiting
  for a file being allocated) after a put that saw a new commitlog file appear, and after
  every :data:`DISK_CHECK_BYTES` written, so a fast producer stops within a file of the
  limit instead of writing on to a really full disk (ENOSPC);
* creating a file fails with no space left (:class:`~pymq.errors.DiskFullError`).

The store owns one guard and calls it under its lock; the guard sets the store's
``disk_full`` flag, which the put paths and cleanup read.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from pymq.broker.store.cleanup import try_disk_ratio
from pymq.broker.store.results import PutStatus
from pymq.errors import DiskFullError, StoreError
from pymq.logs import RateLimitedLog, get_logger

if TYPE_CHECKING:
    from pymq.broker.store.mapped_file_queue import MappedFileQueue
    from pymq.broker.store.store_view import GuardedView

log = get_logger("broker.store")

#: The write path re-measures disk use after this many bytes (and whenever a commitlog file appears).
DISK_CHECK_BYTES = 16 * 1024 * 1024
#: Why writes are refused while the disk is full (the send's remark; clients may match "disk full").
DISK_FULL_REASON = "disk full: writes refused until cleanup"


class WriteRefusal:
    """Why the store refuses puts: a full disk, or a consume-queue file backlog (the file maker's).

    A full disk is named first: cleanup alone ends it, the backlog ends by itself. Set from
    several threads (cleanup, the put path, the file maker), hence the lock.
    """

    __slots__ = ("_lock", "backlog", "disk_full")

    def __init__(self) -> None:
        self.disk_full = False
        #: why the file maker's backlog refuses puts (None: it does not)
        self.backlog: str | None = None
        self._lock = threading.Lock()

    def set_disk_full(self, full: bool) -> str | None:
        """Returns the reason puts are refused now (None: they are not)."""
        with self._lock:
            self.disk_full = full
            return self._reason()

    def set_backlog(self, reason: str | None) -> str | None:
        """Returns the reason puts are refused now (None: they are not)."""
        with self._lock:
            self.backlog = reason
            return self._reason()

    def _reason(self) -> str | None:
        return DISK_FULL_REASON if self.disk_full else self.backlog


class DiskGuard:
    """Measures disk use on the write path, cheaply; call :meth:`after_put` under the store lock."""

    __slots__ = ("_limited_log", "checked_files", "checked_next", "last_ratio", "mfq", "store", "unchecked_bytes")

    def __init__(self, store: GuardedView, mfq: MappedFileQueue) -> None:
        self.store = store
        #: the commitlog's files
        self.mfq = mfq
        #: bytes written since the last measurement, and the files seen at it
        self.unchecked_bytes = 0
        self.checked_files = 0
        self.checked_next: object = None
        #: the last disk use measured (what :meth:`measure` answers while a file is allocated)
        self.last_ratio = 0.0
        self._limited_log = RateLimitedLog(log)

    def after_put(self, stored_bytes: int) -> None:
        """A put wrote ``stored_bytes``: measure if enough were written or the commitlog's files changed.

        A few attribute reads per put; it measures only after a new commitlog file appeared
        or :data:`DISK_CHECK_BYTES` were written.
        """
        self.unchecked_bytes += stored_bytes
        mfq = self.mfq
        if (
            self.unchecked_bytes >= DISK_CHECK_BYTES
            or len(mfq.files) != self.checked_files
            or mfq.next_file is not self.checked_next
        ):
            self.check()

    def check(self) -> None:
        """Refuse writes as soon as the disk is above ``disk_full_ratio`` (under the store lock).

        Checking here too, besides the cleanup passes, keeps a fast producer from writing on
        to a really full disk (ENOSPC) between two passes. A measurement never waits for a
        file being allocated: it is retried at the next write.
        """
        store = self.store
        ratio = try_disk_ratio(store)
        if ratio is None:
            return
        self.last_ratio = ratio
        mfq = self.mfq
        self.unchecked_bytes = 0
        self.checked_files = len(mfq.files)
        self.checked_next = mfq.next_file
        limit = store.config.disk_full_ratio
        if ratio > limit and not store.disk_full:
            store.disk_full = True
            log.error("disk_full_writes_refused", disk_ratio=round(ratio, 3), limit=limit, found_by="write_path")

    def recheck(self) -> None:
        """Measure disk use again at the next write (files were removed under the store lock)."""
        self.checked_files = -1

    def measure(self) -> float:
        """Disk use now, without waiting for a file being allocated (then: the last figure measured)."""
        ratio = try_disk_ratio(self.store)
        if ratio is None:
            return self.last_ratio
        self.last_ratio = ratio
        return ratio

    def append_failed(self, exc: StoreError) -> tuple[PutStatus, str]:
        """The status and reason for records a file-creation failure kept out (logged, rate-limited).

        No space left (ENOSPC/EDQUOT) is a full disk: writes are refused from now on until a
        cleanup pass finds space (SERVICE_NOT_AVAILABLE, as RocketMQ answers on a full
        disk, which producers retry on another broker); anything else is a broken store.
        """
        if isinstance(exc, DiskFullError):
            store = self.store
            if not store.disk_full:
                store.disk_full = True
                log.error("disk_full_writes_refused", reason=str(exc), found_by="enospc")
            return PutStatus.SERVICE_NOT_AVAILABLE, f"{DISK_FULL_REASON} ({exc})"
        self._limited_log.log("error", "append_failed", reason=str(exc))
        return PutStatus.CREATE_MAPPED_FILE_FAILED, str(exc)
