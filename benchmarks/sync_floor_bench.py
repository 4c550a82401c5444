"""The floor under SYNC_FLUSH / ASYNC_FLUSH with 8 closed-loop producers: a bare server, no pymq.

    python benchmarks/sync_floor_bench.py [--seconds 4] [--clients 8] [--work-us 0 10] [--dir DIR]
                                          [--sync-by fdatasync msync syncer]

Issue 19 asks of pymq SYNC_FLUSH >= 0.5x ASYNC_FLUSH with 8 single-send producers in one client
process (``pymq-bench producer --concurrency 8 --flush ...``). This measures what the machine
allows for that shape with everything pymq adds taken away:

* the server (a child process, uvloop) reads 4-byte-length frames of 1 KiB, ``pwrite``s each to a
  preallocated, already written file and answers 8 bytes: at once (``async``), or once a sync
  covers it. Its group commit is an oracle no real broker has: it syncs exactly when every client
  is waiting (each has one request out), so every sync covers all of them. While requests wait the
  loop spins (``call_soon``), as pymq's group commit does, so no arrival waits for it to wake.
  It syncs (``--sync-by``) with ``fdatasync`` or ``msync`` of the new range on the loop itself
  (no hand-off at all: a broker must not block its loop so), or with pymq's C syncer thread
  (``pymq._speedups.Syncer``: the range handed over, the answer back on an eventfd), which is
  the hand-off pymq's SYNC_FLUSH pays;
* the client (uvloop, one process, ``--clients`` connections, one coroutine each) sends, awaits
  the answer, then spins ``--work-us`` microseconds: the per-send cost of a heavier client. Pick
  the value whose ``async`` rate matches pymq's ASYNC_FLUSH rate to compare like with like
  (10 us on this VM: ~53-57k msgs/s, as ``pymq-bench producer --embedded --duration 10
  --concurrency 8 --flush ASYNC_FLUSH``).

Prints, per ``--work-us``, the async rate and each sync mode's rate with its ratio to async
(``--json``: the rates). ``benchmarks/run_all.sh`` runs it with ``--work-us 10``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import mmap
import multiprocessing
import os
import socket
import struct
import tempfile
import time

BODY = 1024
FILE_SIZE = 256 << 20
_LEN = struct.Struct("!I")
ANSWER = bytes(8)
PAGE = mmap.PAGESIZE
MS_SYNC = 4
#: the sync modes: on the loop by fdatasync or msync (floors), or by pymq's C syncer thread
SYNC_BY = ("fdatasync", "msync", "syncer")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


# --- server ---------------------------------------------------------------------------------------


class _Store:
    """Appends to a preallocated file; under ``sync``, answers once a sync covers every waiting request."""

    def __init__(self, path: str, sync_by: str | None, clients: int) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.posix_fallocate(self.fd, 0, FILE_SIZE)
        zeros = bytes(1 << 20)
        for off in range(0, FILE_SIZE, len(zeros)):  # written blocks: a sync writes data, not metadata
            os.pwrite(self.fd, zeros, off)
        os.fsync(self.fd)
        self.mm = mmap.mmap(self.fd, FILE_SIZE)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.pos = self.synced_to = 0
        self.sync_by = sync_by
        self.clients = clients
        self.waiting: list[asyncio.Transport] = []
        self.spinning = self.syncing = False
        self.spin_until = 0.0
        self.loop = asyncio.get_event_loop()
        self.syncer = None
        if sync_by == "syncer":
            from pymq._speedups import Syncer  # (the C accelerator: pip install -e . builds it)

            self.syncer = Syncer()
            self.loop.add_reader(self.syncer.fileno(), self.synced)

    def put(self, transport: asyncio.Transport, payload: bytes) -> None:
        if self.pos + len(payload) > FILE_SIZE:
            self.pos = self.synced_to = 0
        os.pwrite(self.fd, payload, self.pos)
        self.pos += len(payload)
        if self.sync_by is None:
            transport.write(ANSWER)
            return
        self.waiting.append(transport)
        if len(self.waiting) >= self.clients and not self.syncing:
            self.commit()
        elif not self.spinning:
            self.spinning = True
            self.spin_until = time.perf_counter() + 0.002
            self.loop.call_soon(self.spin)

    def spin(self) -> None:
        """Poll while requests wait (for the rest of them, or for the sync's answer)."""
        if not self.waiting and not self.syncing:
            self.spinning = False
        elif not self.syncing and time.perf_counter() >= self.spin_until:  # clients stopping: sync who waits
            self.spinning = False
            self.commit()
        else:
            self.loop.call_soon(self.spin)

    def _range(self) -> tuple[int, int]:
        start = self.synced_to - self.synced_to % PAGE
        self.synced_to = self.pos
        return self.address + start, self.pos - start

    def commit(self) -> None:
        waiting, self.waiting = self.waiting, []
        if self.syncer is not None:  # the C syncer's thread, answered through its eventfd (pymq's hand-off)
            self.syncing = True
            self.syncer.submit(waiting, [self._range()])
            if not self.spinning:
                self.spinning = True
                self.loop.call_soon(self.spin)
            return
        # On the loop itself: the floor without a hand-off (a broker must not block its loop so).
        if self.sync_by == "msync":
            if _libc.msync(*self._range(), MS_SYNC) != 0:
                raise OSError(ctypes.get_errno(), "msync")
        else:
            os.fdatasync(self.fd)
        for t in waiting:
            t.write(ANSWER)

    def synced(self) -> None:
        assert self.syncer is not None
        done = self.syncer.take()
        if not done:
            return
        self.syncing = False
        self.spin_until = time.perf_counter() + 0.002  # (a fresh wait for the group answered now)
        for waiting, err in done:
            if err:
                raise OSError(err, "msync")
            for t in waiting:
                t.write(ANSWER)
        if len(self.waiting) >= self.clients:
            self.commit()


class _ServerConn(asyncio.Protocol):
    def __init__(self, store: _Store) -> None:
        self.store = store
        self.buf = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]  # (uvloop's is no subclass)
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while len(buf) >= 4:
            (n,) = _LEN.unpack_from(buf)
            if len(buf) < 4 + n:
                break
            payload = bytes(buf[4 : 4 + n])
            del buf[: 4 + n]
            self.store.put(self.transport, payload)


def _serve(port_out: multiprocessing.Queue, path: str, sync_by: str | None, clients: int) -> None:  # type: ignore[type-arg]
    loop = _new_loop()
    asyncio.set_event_loop(loop)
    store = _Store(path, sync_by, clients)
    server = loop.run_until_complete(loop.create_server(lambda: _ServerConn(store), "127.0.0.1", 0))
    port_out.put(server.sockets[0].getsockname()[1])
    try:
        loop.run_forever()
    finally:
        os.close(store.fd)


# --- client ---------------------------------------------------------------------------------------


class _ClientConn(asyncio.Protocol):
    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None
        self.got = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]  # (uvloop's is no subclass)
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= 8 and self.waiter is not None and not self.waiter.done():
            self.got -= 8
            self.waiter.set_result(None)


async def _client(port: int, clients: int, seconds: float, work_us: float) -> int:
    loop = asyncio.get_running_loop()
    frame = _LEN.pack(BODY) + os.urandom(BODY)
    work = work_us / 1e6
    conns = [(await loop.create_connection(_ClientConn, "127.0.0.1", port))[1] for _ in range(clients)]
    deadline = time.perf_counter() + seconds
    counts = [0] * clients

    async def run(i: int, conn: _ClientConn) -> None:
        while time.perf_counter() < deadline:
            conn.waiter = loop.create_future()
            conn.transport.write(frame)
            await conn.waiter
            counts[i] += 1
            if work:
                until = time.perf_counter() + work
                while time.perf_counter() < until:
                    pass

    await asyncio.gather(*(run(i, c) for i, c in enumerate(conns)))
    for c in conns:
        c.transport.close()
    return sum(counts)


def measure(sync_by: str | None, clients: int, seconds: float, work_us: float, directory: str) -> float:
    """msgs/s of ``clients`` closed-loop senders against a server syncing by ``sync_by`` (None: no sync)."""
    ctx = multiprocessing.get_context("spawn")
    ports: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        server = ctx.Process(target=_serve, args=(ports, os.path.join(tmp, "log"), sync_by, clients))
        server.start()
        try:
            port = ports.get(timeout=60)
            loop = _new_loop()
            try:
                n = loop.run_until_complete(_client(port, clients, seconds, work_us))
            finally:
                loop.close()
        finally:
            server.kill()  # (by its PID: the child this started)
            server.join()
    return n / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--work-us", type=float, nargs="+", default=[0.0, 10.0])
    ap.add_argument("--dir", default=".", help="a directory on the disk to measure")
    ap.add_argument(
        "--sync-by", nargs="+", choices=SYNC_BY, default=list(SYNC_BY), help="how the sync modes sync (see above)"
    )
    ap.add_argument("--json", action="store_true", help="print {work_us: {async: rate, <sync-by>: rate}} as JSON")
    args = ap.parse_args()
    results: dict[str, dict[str, float]] = {}
    for work in args.work_us:
        base = measure(None, args.clients, args.seconds, work, args.dir)
        row = results[f"{work:g}"] = {"async": base}
        line = f"work {work:4.0f} us: async {base:9,.0f} msgs/s"
        for how in args.sync_by:
            rate = row[how] = measure(how, args.clients, args.seconds, work, args.dir)
            line += f" | {how} {rate:8,.0f} ({rate / base:.2f})"
        if not args.json:
            print(line, flush=True)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
