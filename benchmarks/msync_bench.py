"""msync of disjoint 8 KiB ranges of one preallocated, mapped file from 1, 2 and 3 threads: syncs/s and p50.

    python benchmarks/msync_bench.py [PATH]     # PATH: a scratch file on the disk to measure (removed after)
"""
import mmap, os, time, ctypes, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.msync.argtypes=[ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
path = sys.argv[1] if len(sys.argv) > 1 else "msync_bench.tmp"; size = 64<<20
fd = os.open(path, os.O_RDWR|os.O_CREAT); os.posix_fallocate(fd, 0, size)
mm = mmap.mmap(fd, size); buf = (ctypes.c_char*size).from_buffer(mm); addr = ctypes.addressof(buf)
mm[:] = b"\0" * size  # fault everything in
libc.msync(addr, size, 4)
def worker(tid, nthreads, n, lat):
    for i in range(n):
        pos = ((i * nthreads + tid) * 8192) % (size - 8192)
        mm[pos:pos+8192] = b"x" * 8192
        t = time.perf_counter(); libc.msync(addr + pos, 8192, 4); lat.append(time.perf_counter() - t)
for nthreads in (1, 2, 3):
    lat = []; ths = [threading.Thread(target=worker, args=(i, nthreads, 400, lat)) for i in range(nthreads)]
    t = time.perf_counter(); [x.start() for x in ths]; [x.join() for x in ths]; dt = time.perf_counter() - t
    lat.sort(); print(f"{nthreads} threads: {len(lat)/dt:,.0f} msyncs/s, p50 {lat[len(lat)//2]*1e6:.0f} us")
del buf; mm.close(); os.close(fd); os.unlink(path)
