"""The store directory's ``lock`` file: flock()ed by the running store (holding its pid), so a second
store on the same directory fails at start instead of corrupting the first one's files."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from pymq.errors import StoreLockedError


class DirLock:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock; :class:`StoreLockedError` if another process holds it."""
        path = self.root / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(
                f"store directory {self.root} is in use by another process (lock file {path})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        """Let go of the lock (nothing if not held)."""
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
