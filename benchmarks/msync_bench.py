"""msync of disjoint 8 KiB ranges of one preallocated, mapped file from 1, 2 and 3 threads: syncs/s and p50.

    python benchmarks/msync_bench.py [PATH]     # PATH: a scratch file on the disk to measure (removed after)

A failed msync, or a thread that died, ends the run with exit code 1 instead of a figure.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MS_SYNC = 4
SIZE = 64 << 20
PIECE = 8192


def msync(addr: int, length: int) -> None:
    if libc.msync(addr, length, MS_SYNC) != 0:  # a failed sync must not be timed as a fast one
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def worker(mm: mmap.mmap, addr: int, tid: int, nthreads: int, n: int, lat: list[float]) -> None:
    for i in range(n):
        pos = ((i * nthreads + tid) * PIECE) % (SIZE - PIECE)
        mm[pos : pos + PIECE] = b"x" * PIECE
        t = time.perf_counter()
        msync(addr + pos, PIECE)
        lat.append(time.perf_counter() - t)


def round_of(mm: mmap.mmap, addr: int, nthreads: int) -> str:
    lat: list[float] = []
    errors: list[BaseException] = []  # read after the round: a dead thread would still leave a figure

    def run(tid: int) -> None:
        try:
            worker(mm, addr, tid, nthreads, 400, lat)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(nthreads)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    dt = time.perf_counter() - t
    if errors:
        raise RuntimeError(f"{nthreads} threads: {errors!r}")
    lat.sort()
    return f"{nthreads} threads: {len(lat) / dt:,.0f} msyncs/s, p50 {lat[len(lat) // 2] * 1e6:.0f} us"


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "msync_bench.tmp"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.posix_fallocate(fd, 0, SIZE)
        mm = mmap.mmap(fd, SIZE)
        buf = (ctypes.c_char * SIZE).from_buffer(mm)
        addr = ctypes.addressof(buf)
        mm[:] = b"\0" * SIZE  # fault everything in
        msync(addr, SIZE)
        try:
            for nthreads in (1, 2, 3):
                print(round_of(mm, addr, nthreads), flush=True)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        finally:
            del buf
            mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
