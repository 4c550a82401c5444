"""SYNC_FLUSH's commitlog writes with pwrite (``store.sync_flush_pwrite``): a failed write stores nothing.

(That both write paths store the same bytes is in ``test_speedups_store``.)
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pymq.broker.store import MessageStore
from pymq.broker.store.results import PutStatus
from tests.store.storeutil import open_store, record, records_of


def failing_pwrite(store: MessageStore, monkeypatch: pytest.MonkeyPatch, err: int, fail_at_call: int) -> list[int]:
    """Make the ``fail_at_call``-th pwrite to a commitlog file fail with ``err`` (once); returns the call count."""
    real = os.pwrite
    calls = [0]

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if any(mf.fd == fd for mf in store.commitlog.mfq.files):
            calls[0] += 1
            if calls[0] == fail_at_call:
                raise OSError(err, os.strerror(err))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    return calls


@pytest.mark.parametrize(
    ("err", "status"),
    [(errno.EIO, PutStatus.CREATE_MAPPED_FILE_FAILED), (errno.ENOSPC, PutStatus.SERVICE_NOT_AVAILABLE)],
    ids=["EIO", "ENOSPC"],
)
def test_a_failed_pwrite_stores_nothing_of_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, status: PutStatus
) -> None:
    store = open_store(tmp_path / "s", flush_disk_type="SYNC_FLUSH")
    try:
        assert store.commitlog.pwrite
        first = store.put("T", 0, record(body=b"kept"))
        assert [r.status for r in first] == [PutStatus.PUT_OK]
        end = store.commitlog.max_offset
        # A batch with a refused record in the middle is written as two runs: the second fails.
        bad = bytearray(record(body=b"bad"))
        bad[8:12] = b"\0\0\0\1"  # body CRC
        calls = failing_pwrite(store, monkeypatch, err, fail_at_call=2)
        results = store.put("T", 0, record(body=b"a") + bytes(bad) + record(body=b"b"))
        assert calls[0] == 2
        assert PutStatus.PUT_OK not in [r.status for r in results]
        assert status in [r.status for r in results]
        assert store.commitlog.max_offset == end
        mf = store.commitlog.mfq.files[-1]
        assert bytes(mf.view()[end - mf.file_from : end - mf.file_from + 4096]) == bytes(4096)  # the first run undone
        got = store.get_messages("g", "T", 0, 0)
        assert [r.body for r in records_of(got)] == [b"kept"]
        if err == errno.ENOSPC:
            assert store.disk_full  # refused until a cleanup pass finds room, as for a file that cannot be made
            store.disk_full = False
        after = store.put("T", 0, record(body=b"later"))
        assert [r.status for r in after] == [PutStatus.PUT_OK]
        assert [r.body for r in records_of(store.get_messages("g", "T", 0, 0))] == [b"kept", b"later"]
    finally:
        store.shutdown()
