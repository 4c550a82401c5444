"""A lock with a shared mode: the commitlog's sync threads share it, file removal takes it alone.

``with lock:`` takes it exclusively, like a :class:`threading.Lock` (so code that deletes,
truncates or closes files needs no change); ``with lock.shared():`` lets any number of
holders in at once (the SYNC_FLUSH workers, each msyncing its own range). A waiting
exclusive holder stops new shared holders from entering, so cleanup is never starved by
back-to-back syncs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class SharedLock:
    """Exclusive by default (``with lock``), shared on request (``with lock.shared()``)."""

    __slots__ = ("_cond", "_exclusive", "_exclusive_waiting", "_shared")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0
        self._exclusive = False
        self._exclusive_waiting = 0

    def acquire(self) -> None:
        with self._cond:
            self._exclusive_waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._cond.wait()
            finally:
                self._exclusive_waiting -= 1
            self._exclusive = True

    def release(self) -> None:
        with self._cond:
            if not self._exclusive:
                raise RuntimeError("release of a SharedLock not held exclusively")
            self._exclusive = False
            self._cond.notify_all()

    def __enter__(self) -> SharedLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the lock together with other shared holders (never with an exclusive one)."""
        cond = self._cond
        with cond:
            while self._exclusive or self._exclusive_waiting:
                cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with cond:
                self._shared -= 1
                if not self._shared:
                    cond.notify_all()

    @property
    def held_exclusively(self) -> bool:
        return self._exclusive
