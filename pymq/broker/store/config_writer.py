"""Writes one JSON config file off the caller's thread, coalescing changes (group commit for config).

A broker's tables (topics, subscription groups) change on the event loop, sometimes in floods:
an operator script creating a thousand topics, or a misbehaving client sending an update per
request. Writing the whole table (JSON encoding, two fsyncs, a ``.bak`` copy) on every change
blocked the loop for milliseconds each time and made a flood of changes cost O(changes x table
size). Here a change only marks the file dirty and returns; one short-lived thread writes the
latest snapshot, and every change made while a write is running is covered by the next one, so
N changes during a write cost one more write, not N.

Whoever must not answer before the change is on disk (an admin request creating a topic) passes
a callback to :meth:`ConfigWriter.changed`: it runs, on the writer thread, once a write that
began after the change has been synced, with the exception if that write failed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymq.broker.store.config_files import write_json_atomic
from pymq.logs import get_logger

log = get_logger("broker.store.config")

#: a caller's "it is durable" hook: None when the write that covers its change succeeded
Durable = Callable[[Exception | None], None]


class ConfigWriter:
    """Writes ``snapshot()`` to ``path`` after each change, in the background, coalesced."""

    def __init__(self, path: Path, snapshot: Callable[[], Any]) -> None:
        self.path = path
        self.snapshot = snapshot
        self._lock = threading.Lock()
        #: one write at a time (the thread's and a flush's): the last to finish holds the latest snapshot
        self._write_lock = threading.Lock()
        #: changes made so far / the count covered by the last successful write
        self._changes = 0
        self._written = 0
        self._waiters: list[tuple[int, Durable]] = []
        self._thread: threading.Thread | None = None
        #: writes done (tests and metrics: how much coalescing happened)
        self.writes = 0

    @property
    def dirty(self) -> bool:
        return self._written < self._changes

    def changed(self, on_durable: Durable | None = None) -> None:
        """Note a change; write it soon; call ``on_durable`` once it is on disk (or failed to be)."""
        with self._lock:
            self._changes += 1
            if on_durable is not None:
                self._waiters.append((self._changes, on_durable))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"config-writer-{self.path.name}", daemon=True)
                self._thread.start()

    def flush(self) -> None:
        """Wait for the running write, then write what is still dirty, on this thread (shutdown, tests)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self.dirty:
            self._write_once()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self.dirty:
                    self._thread = None
                    return
            if not self._write_once():
                with self._lock:  # leave it dirty: the next change (or flush) tries again
                    self._thread = None
                return

    def _write_once(self) -> bool:
        error: Exception | None = None
        with self._write_lock:
            with self._lock:
                covers = self._changes
            try:
                write_json_atomic(self.path, self.snapshot())
            except Exception as exc:  # a full or read-only disk: logged, and told to whoever waits
                error = exc
                log.error("config_write_failed", path=str(self.path), reason=f"{type(exc).__name__}: {exc}")
        with self._lock:
            if error is None:
                self._written = max(self._written, covers)
                self.writes += 1
            done = [w for w in self._waiters if w[0] <= covers]
            self._waiters = [w for w in self._waiters if w[0] > covers]
        for _ticket, callback in done:
            try:
                callback(error)
            except Exception:
                log.exception("config_durable_callback_failed", path=str(self.path))
        return error is None


__all__ = ["ConfigWriter", "Durable"]
