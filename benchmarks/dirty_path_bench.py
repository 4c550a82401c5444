"""msync latency by how the synced pages were dirtied: through a shared mapping, or with pwrite.

    python benchmarks/dirty_path_bench.py [DIR] [--seconds S]     # DIR: on the disk to measure (default .)

A SYNC_FLUSH-like writer appends 9,000 bytes (eight 1 KiB sends and their headers, not page
aligned: consecutive syncs share a page), syncs them with msync(MS_SYNC), pauses 300 us (the
senders' turnaround), for S seconds per mode, on a preallocated file whose blocks are
already written (as after the store's write-ahead; ``--unwritten``: fallocated only):

* ``mapped``: the bytes are copied into the mapping (the commitlog's write path under ASYNC_FLUSH);
* ``pwrite``: the bytes are written with pwrite, the file mapped all the same (SYNC_FLUSH's,
  ``store.sync_flush_pwrite``).

Prints p50/p90 per mode and the p50 of every second. Measured on this VM (ext4, virtio,
write-back cache), 2026-11-25: mapped ~275-290 us from the first second, pwrite ~95-110 us.
A page written through the mapping again after a sync cleaned it is dirtied by a write fault
(ext4's page_mkwrite), and that is what makes its next sync dear.
"""

import argparse
import ctypes
import mmap
import os
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MS_SYNC = 4
SIZE = 256 << 20
WRITE = 9000
PAUSE = 0.0003


def prepare(path: str, unwritten: bool) -> tuple[int, mmap.mmap, int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.posix_fallocate(fd, 0, SIZE)
    if not unwritten:
        zeros = bytes(1 << 20)
        for off in range(0, SIZE, len(zeros)):
            os.pwrite(fd, zeros, off)
    os.fsync(fd)
    m = mmap.mmap(fd, SIZE)
    return fd, m, ctypes.addressof(ctypes.c_char.from_buffer(m))


def run(mode: str, directory: str, seconds: float, unwritten: bool) -> None:
    path = os.path.join(directory, f"dirty_path_bench.{os.getpid()}")
    fd, m, addr = prepare(path, unwritten)
    try:
        data = os.urandom(WRITE)
        pos, per_second, started = 0, {}, time.perf_counter()
        while time.perf_counter() - started < seconds:
            if mode == "mapped":
                m[pos : pos + WRITE] = data
            else:
                os.pwrite(fd, data, pos)
            page = (addr + pos) & ~(mmap.PAGESIZE - 1)
            t0 = time.perf_counter()
            if libc.msync(ctypes.c_void_p(page), addr + pos + WRITE - page, MS_SYNC) != 0:
                raise OSError(ctypes.get_errno(), "msync")
            t1 = time.perf_counter()
            per_second.setdefault(int(t1 - started), []).append(t1 - t0)
            pos = (pos + WRITE) % (SIZE - 2 * WRITE)
            while time.perf_counter() - t1 < PAUSE:
                pass
        every = sorted(v for values in per_second.values() for v in values)
        seconds_p50 = " ".join(f"{sorted(v)[len(v) // 2] * 1e6:.0f}" for _, v in sorted(per_second.items()))
        print(
            f"{mode:7s} syncs {len(every):6d}  p50 {every[len(every) // 2] * 1e6:4.0f} us  "
            f"p90 {every[int(len(every) * 0.9)] * 1e6:4.0f} us   p50 by second: {seconds_p50}"
        )
    finally:
        del addr
        m.close()
        os.close(fd)
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default=".")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--unwritten", action="store_true", help="fallocate only: the blocks stay unwritten extents")
    args = ap.parse_args()
    for mode in ("mapped", "pwrite", "mapped", "pwrite"):
        run(mode, args.dir, args.seconds, args.unwritten)


if __name__ == "__main__":
    main()
