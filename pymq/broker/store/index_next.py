"""The next index file, made ahead of time on the file-maker thread.

An index file is big (``40 + 4·slots + 20·entries`` bytes: ~420 MB with the default 5M
slots and 20M entries) and making one (``open``, ``posix_fallocate``, ``mmap``) took ~2.6 ms
on this VM: on the writer's thread (the broker's event loop) that stalled every send each
time the newest file filled. Instead, once the newest file is :data:`PREPARE_FRACTION` full
(and at start when there is none), :class:`~pymq.broker.store.index.IndexService` queues a
:class:`NextIndexFile` to the store's :class:`~pymq.broker.store.file_maker.FileMaker`,
which creates and maps it. At the roll the writer takes it (:meth:`NextIndexFile.take`):
made already, it costs nothing; being made, the writer waits for the rest of that creation;
not started or failed, the writer makes it itself, as before.

Recovery: a file made ahead but never taken has an all-zero header (the writer writes the
header when it takes the file), and :meth:`IndexService.load` deletes index files whose
header was never written; a clean shutdown deletes it at once (:meth:`NextIndexFile.discard`).
Its name is the creation time of the request, made later than the newest file's name, so
the files still sort in the order they were written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pymq.broker.store.mapped_file import MappedFile
from pymq.logs import RateLimitedLog, get_logger

if TYPE_CHECKING:
    from pymq.broker.store.file_maker import FileMaker

log = get_logger("broker.store.index")
_limited = RateLimitedLog(log)

#: the next file is queued to the maker once the newest holds this fraction of its entries
PREPARE_FRACTION = 0.9


class NextIndexFile:
    """An index file the maker creates ahead of the roll (a :class:`~pymq.broker.store.file_maker.PendingFile`)."""

    __slots__ = ("made", "making", "path", "pending", "size")

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        #: the maker's state for it (file_maker.QUEUED ...)
        self.making = 0
        #: the created file, once made (None: not yet, or creating it failed)
        self.made: MappedFile | None = None
        #: no entries wait for this file (the maker's backlog counts only consume-queue buffers)
        self.pending: bytearray | None = None

    def create_mapping(self) -> MappedFile | None:
        """Create and map the file (maker thread, no store lock); None if that failed (logged).

        A failure is not retried here: the writer makes the file itself at the roll (and
        answers for its failure), and the maker's consume-queue files are not held up.
        """
        try:
            return MappedFile(self.path, self.size, create=True)
        except Exception as exc:  # (anything: the maker's consume-queue files must not wait behind it)
            _limited.log("warning", "index_file_preparation_failed", path=str(self.path), reason=str(exc))
            return None

    def adopt(self) -> None:
        """Nothing to do under the store lock: the writer takes the file at its roll (:meth:`take`)."""

    def take(self, maker: FileMaker | None) -> tuple[MappedFile, bool]:
        """The file to roll to, and whether it was made ahead (else made now, on the caller's thread).

        Raises :class:`StoreError` if it has to be made now and that fails.
        """
        if maker is not None:
            maker.claim(self)  # waits if the maker is making it right now; takes it back if queued
        mf, self.made = self.made, None
        if mf is not None:
            return mf, True
        return MappedFile(self.path, self.size, create=True), False

    def discard(self, maker: FileMaker | None) -> None:
        """Not needed (a clean shutdown): take it back from the maker and delete the file if made."""
        if maker is not None:
            maker.claim(self)
        mf, self.made = self.made, None
        if mf is not None:
            mf.destroy()

    def abandon(self) -> None:
        """Unmap a made file and leave it on disk (what a crash leaves; the next load deletes it)."""
        mf, self.made = self.made, None
        if mf is not None:
            mf.close()
