"""Consume-queue files that cannot be made: the buffered backlog is bounded, refused puts say why,
puts resume once the file maker catches up, and nothing acknowledged is lost."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pymq.broker.store import MessageStore, PutStatus
from pymq.broker.store.index_next import NextIndexFile
from pymq.broker.store.map_pool import FD_LESS
from pymq.testing import capture_logs
from tests.helpers import wait_until_sync
from tests.store.conftest import StoreFactory
from tests.store.storeutil import keyed


class FailingQueueDir:
    """Creating files under ``consumequeue/`` fails with EACCES (what an unwritable queue directory
    answers; the tests run as root, for whom chmod does not), until :meth:`heal`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.failing = True
        self.refused = 0
        real_open = os.open

        def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if self.failing and flags & os.O_CREAT and "consumequeue" in str(path):
                self.refused += 1
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", fake_open)

    def heal(self) -> None:
        self.failing = False


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> Iterator[FailingQueueDir]:
    yield FailingQueueDir(monkeypatch)


def _maker_store(new_store: StoreFactory, **overrides: Any) -> MessageStore:
    store = new_store(consume_queue_flush_interval_ms=3_600_000, **overrides)
    if store.map_pool.maker is None:
        assert not FD_LESS, "on Linux consume-queue files are made by the maker thread"
        pytest.skip("off Linux consume-queue files are made at once, on the writer: no backlog to bound")
    return store


def test_bytes_backlog_refuses_puts_then_accepts_once_files_are_made(
    new_store: StoreFactory, failing: FailingQueueDir
) -> None:
    """Files keep failing: past max_pending_bytes buffered, puts are SERVICE_NOT_AVAILABLE naming the
    file and the error (one error line); once creation works again puts resume and every
    acknowledged entry is in the made files."""
    store = _maker_store(new_store, consume_queue_max_pending_bytes=20 * 20)
    acked = []
    with capture_logs() as logs:
        for i in range(400):
            r = store.put("B", 0, keyed(i, "B"))[0]
            if r.status != PutStatus.PUT_OK:
                break
            acked.append(r.queue_offset)
            if i == 0:  # (the refusal names the failure once there was one)
                wait_until_sync(lambda: failing.refused >= 1, timeout=30, what="the first failed creation")
            if i >= 24:  # over the limit: let the maker measure (every 50 ms while it retries)
                wait_until_sync(lambda: store.refused is not None, timeout=30, what="the backlog refusal")
        refused = store.put("B", 1, keyed(10_000, "B"))[0]
    assert failing.refused >= 1 and 20 < len(acked) < 400
    assert refused.status == PutStatus.SERVICE_NOT_AVAILABLE
    assert refused.reason.startswith("consume-queue files not made") and "Permission denied" in refused.reason
    assert "consumequeue/B/0" in refused.reason and store.queue_file_backlog == refused.reason
    lines = [e for e in logs if e["event"] == "consume_queue_backlog_writes_refused"]
    assert len(lines) == 1 and lines[0]["log_level"] == "error"
    assert lines[0]["errno"] == errno.EACCES and "consumequeue/B/0" in str(lines[0]["path"])
    # Several batches at once are refused the same way.
    (batch,) = store.put_batches([("B", 0, keyed(10_001, "B")), ("B", 1, keyed(10_002, "B"))])[:1]
    assert batch[0].status == PutStatus.SERVICE_NOT_AVAILABLE
    # Reads still work, from the buffers.
    assert store.get_messages("g", "B", 0, 0, 1000).message_count == len(acked)

    failing.heal()
    with capture_logs() as logs:
        wait_until_sync(lambda: store.refused is None, timeout=30, what="the maker catching up")
    assert any(e["event"] == "consume_queue_backlog_cleared_writes_accepted" for e in logs)
    assert not store.map_pool.pending
    ok = store.put("B", 0, keyed(20_000, "B"))[0]
    assert ok.status == PutStatus.PUT_OK and ok.queue_offset == len(acked)
    assert acked == list(range(len(acked)))
    store.shutdown()
    again = new_store()
    assert again.get_messages("g", "B", 0, 0, 1000).message_count == len(acked) + 1


def test_files_backlog_refuses_at_once_and_a_crash_loses_nothing(
    new_store: StoreFactory, failing: FailingQueueDir, tmp_path: Path
) -> None:
    """Past max_pending_files waiting, the put that queues one more file turns puts off; a crash
    while files are still unmade loses no acknowledged entry (recovery re-dispatches them)."""
    store = _maker_store(new_store, consume_queue_max_pending_files=3)
    # The index's next file waits in the same queue but buffers no entry: it must not count (it
    # used to, when the index queued it before these puts: then the 4th put was refused).
    maker = store.map_pool.maker
    assert maker is not None
    index_next = NextIndexFile(tmp_path / "index-next", 4096)
    maker.submit(index_next)
    statuses = [store.put("F", q, keyed(q, "F"))[0].status for q in range(8)]
    # the 4th file waiting passes the limit: that put is stored (its entry buffered), later ones refused
    assert statuses == [PutStatus.PUT_OK] * 4 + [PutStatus.SERVICE_NOT_AVAILABLE] * 4
    assert "files waiting" in (store.refused or "") or "Permission denied" in (store.refused or "")
    assert len(store.map_pool.pending) == 4
    index_next.discard(maker)  # (still queued behind the failing files: taken back, never made)
    store.halt()  # a crash with four files never made
    failing.heal()
    again = new_store(consume_queue_max_pending_files=3)
    assert again.refused is None
    assert [again.max_offset("F", q) for q in range(8)] == [1] * 4 + [0] * 4
    for q in range(4):
        got = again.get_messages("g", "F", q, 0)
        assert got.message_count == 1 and b"U%d" % q in bytes(got.buffers[0])
