"""The C accelerator's Syncer (pymq/_speedups_src/sync.c): msync jobs on its own thread, done jobs on an eventfd.

SYNC_FLUSH uses it through the store (sync_plan / sync_done) and the broker (loop_sync); these
tests drive it directly: order, errors as errnos (never a crash), the queue bound, close with
jobs pending, and that a token stays alive exactly until take() hands it back.
"""

from __future__ import annotations

import errno
import gc
import mmap
import os
import select
import shutil
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pymq.broker.store.mapped_file import _address
from pymq.protocol import accelerator
from tests.helpers import CheckedThread

#: the class, whether or not PYMQ_NO_SPEEDUPS switched the record functions off
Syncer: Any = getattr(accelerator._speedups, "Syncer", None)
#: page 1 is never mapped (mmap_min_addr): msync answers ENOMEM for it
UNMAPPED = mmap.PAGESIZE

#: a count no other eventfd of this process holds (see the eventfd test below)
MARK = 0x5EA1ED


def test_the_syncer_is_built_on_linux_with_a_compiler() -> None:
    if os.uname().sysname == "Linux" and (shutil.which("cc") or shutil.which("gcc")):
        assert Syncer is not None


needs_syncer = pytest.mark.skipif(Syncer is None, reason="no C accelerator (checked by the test above)")


Mapping = tuple[mmap.mmap, int]


class Token:
    """A token a weak reference can watch."""


def address_of(mm: mmap.mmap) -> int:
    return _address(mm)


def wait_readable(fd: int, timeout: float = 10.0) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def take_all(syncer: Any, count: int) -> list[tuple[Any, int]]:
    """``count`` finished jobs (waiting on the eventfd between takes)."""
    got: list[tuple[Any, int]] = []
    while len(got) < count:
        assert wait_readable(syncer.fileno()), f"only {len(got)} of {count} jobs done"
        got += syncer.take()
    return got


@pytest.fixture
def mapping(tmp_path: Path) -> Iterator[Mapping]:
    """A 64 KiB file mapped shared, with some bytes written: (mmap, its address)."""
    path = tmp_path / "f"
    path.write_bytes(bytes(64 * 1024))
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0)
    mm[:5] = b"hello"
    addr = address_of(mm)
    yield mm, addr
    mm.close()


@needs_syncer
def test_jobs_finish_in_order_and_signal_the_eventfd(mapping: Mapping) -> None:
    _, addr = mapping
    s = Syncer()
    try:
        assert not wait_readable(s.fileno(), 0)  # nothing done yet: not readable
        s.submit("a", [(addr, 5)])
        s.submit("b", [(addr + 100, 10), (addr + 8192, 4096)])  # unaligned start: rounded down to its page
        s.submit("c", [])
        assert take_all(s, 3) == [("a", 0), ("b", 0), ("c", 0)]
        assert s.pending == 0
        assert not wait_readable(s.fileno(), 0)  # take() reset the eventfd
        assert s.take() == []
    finally:
        s.close()


@needs_syncer
def test_a_bad_address_is_reported_as_its_errno_not_a_crash(mapping: Mapping) -> None:
    _, addr = mapping
    s = Syncer()
    try:
        s.submit("bad", [(UNMAPPED, 4096)])
        s.submit("partly", [(addr, 4096), (UNMAPPED, 4096)])  # the first failure's errno
        s.submit("good", [(addr, 4096)])
        assert take_all(s, 3) == [("bad", errno.ENOMEM), ("partly", errno.ENOMEM), ("good", 0)]
    finally:
        s.close()


@needs_syncer
def test_the_queue_is_bounded_by_jobs_not_taken() -> None:
    s = Syncer(capacity=2)
    try:
        s.submit(1, [])
        s.submit(2, [])
        with pytest.raises(RuntimeError, match="full"):
            s.submit(3, [])  # done or not, the first two are not taken yet
        assert take_all(s, 2) == [(1, 0), (2, 0)]
        s.submit(3, [])
        assert take_all(s, 1) == [(3, 0)]
    finally:
        s.close()


@needs_syncer
def test_bad_arguments_raise_before_anything_is_queued() -> None:
    s = Syncer()
    try:
        with pytest.raises(TypeError):
            s.submit(1, [UNMAPPED])
        with pytest.raises(TypeError):
            s.submit(1, 5)
        with pytest.raises(OverflowError):
            s.submit(1, [(-1, 4096)])
        with pytest.raises(ValueError):
            Syncer(capacity=0)
        assert s.pending == 0
    finally:
        s.close()


@needs_syncer
def test_close_completes_the_queued_jobs_and_take_still_reports_them(mapping: Mapping) -> None:
    """Jobs queued when close() is called are synced (not failed) before the thread exits."""
    mm, addr = mapping
    s = Syncer()
    for i in range(4):
        s.submit(i, [(addr, len(mm))])
    s.close()
    assert s.closed and s.pending == 4
    assert s.take() == [(0, 0), (1, 0), (2, 0), (3, 0)]
    s.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        s.submit(9, [])
    with pytest.raises(ValueError):
        s.fileno()
    assert s.take() == []


@needs_syncer
def test_a_token_lives_until_take_hands_it_back() -> None:
    s = Syncer()
    try:
        token = Token()
        ref = weakref.ref(token)
        s.submit(token, [])
        del token
        gc.collect()
        assert ref() is not None  # the syncer holds it while the job is out
        ((got, err),) = take_all(s, 1)
        assert got is ref() and err == 0
        del got
        gc.collect()
        assert ref() is None
    finally:
        s.close()


@needs_syncer
def test_dropping_a_syncer_with_jobs_out_joins_its_thread_and_frees_the_tokens(mapping: Mapping) -> None:
    mm, addr = mapping
    s = Syncer()
    token = Token()
    ref = weakref.ref(token)
    s.submit(token, [(addr, len(mm))])
    del token, s  # (the job may still be running: dealloc joins the thread first)
    gc.collect()
    assert ref() is None


@needs_syncer
def test_two_closes_at_once_both_return_after_the_queued_jobs(mapping: Mapping) -> None:
    """The store's stop and the broker's loop_sync may both close it: neither returns with a job still queued."""
    mm, addr = mapping
    s = Syncer()
    for i in range(4):
        s.submit(i, [(addr, len(mm))])
    other = CheckedThread(s.close)
    other.start()
    s.close()
    assert [t for t, _ in s.take()] == [0, 1, 2, 3]
    other.result(10)  # returned, and without raising
    assert s.take() == []  # nothing was left queued for the second close to return before


def test_the_eventfd_stays_open_after_close_until_the_syncer_goes() -> None:
    """A loop may still watch the fd when the store stops first: its number is never reused meanwhile."""
    s = Syncer()
    fd = s.fileno()
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.fileno()
    os.fstat(fd)  # still ours
    assert s.take() == []
    os.write(fd, MARK.to_bytes(8, sys.byteorder))  # (tells this eventfd from any that reuses its number)
    del s
    gc.collect()
    # Closed now: the number is free, or already reused by whatever another thread opened since
    # (then it is not our eventfd: not one holding the mark).
    info = Path(f"/proc/self/fdinfo/{fd}")
    try:
        fields = dict(line.split(":", 1) for line in info.read_text().splitlines() if ":" in line)
    except FileNotFoundError:
        return
    assert int(fields.get("eventfd-count", "0").strip(), 16) != MARK
