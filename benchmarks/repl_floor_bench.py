"""The floor under SYNC_MASTER / ASYNC_MASTER with 8 closed-loop producers: bare servers, no pymq.

    python benchmarks/repl_floor_bench.py [--seconds 4] [--rounds 1] [--clients 8] [--modes none async sync]
                                          [--work-us 0 ...] [--server-work-us 0 ...] [--pairs]
                                          [--slave-work-us 0] [--json]

Issue 34 asks of pymq SYNC_MASTER >= 0.6 and ASYNC_MASTER >= 0.8 of the no-slave rate with 8
single-send producers (``replication_bench.py --producers 8 --seconds 5``: client, master and
slave as real processes sharing the 2 cores). This measures what the machine allows that shape
with everything pymq adds taken away, in three processes like the real bench:

* the client (this process, uvloop, ``--clients`` connections, one coroutine each) sends a
  4-byte-length frame of 1 KiB, awaits the 8-byte answer, then spins ``--work-us``
  microseconds of CPU time: the per-send cost of a heavier client;
* the master (a child process, uvloop) copies each request's body to the end of a preallocated
  in-memory log (an anonymous mapping; no file, no sync), spins ``--server-work-us`` per request
  (pymq's per-message handling) and answers 8 bytes;
* the slave (a child process, uvloop) holds a TCP connection to the master on 127.0.0.1, copies
  what arrives to its own log, after every read reports the offset it holds (8 bytes), then
  spins ``--slave-work-us`` per whole message received (the dispatch, off the ack path as
  RocketMQ's reput thread is: consume queue, index).

Modes: ``none`` (no slave process; the master answers at once), ``async`` (the master answers at
once and, once per loop tick, sends the slave all bytes appended since: one write; it reads the
slave's reports and ignores them) and ``sync`` (the same stream, but a request is answered only
once the slave's reported offset covers its end; waiters sit in log order and each report wakes
the covered prefix). That is RocketMQ's HA shape at its best, with oracle advantages no real
broker has: the stream is the bare bytes (no frame header, no checks of offsets or epochs), the
slave reports after every read with no timer, heartbeat or resend, the logs are memory (no file,
no page faults after the first lap), the master has nothing else to do (no store, no topics, no
other connections) and the client is one tight loop per connection (no routes, no codec, no
chain of futures).

The spins burn CPU time (``time.thread_time``), not wall time: on shared cores a preempted spin
still costs what it says, as the work it stands for would. Pick them to compare like with like
with ``replication_bench.py``'s no-slave mode run in the same minutes (it reports the client's
and the master's CPU per message): ``--work-us`` and ``--server-work-us`` whose ``none`` CPU per
message of the client and the master match pymq's; the ``none`` rates then match too. (On this
VM on 2026-11-28 pymq's no slave took ~58 µs/msg on the client and ~61-66 on the master, the
bare floor ~17-23 each: ``--work-us 35-40 --server-work-us 38-45``.) ``--slave-work-us`` 0 is
the floor of the replication itself; set to pymq's ASYNC_MASTER slave CPU per message minus the
floor's, it counts pymq's slave dispatch as given. The floor's ``sync/none`` and ``async/none``
are what the shape allows at those costs: an aim above them is not reachable by cheaper
replication alone, only with cheaper per-message costs on the client and the master.

Prints, per (``--work-us``, ``--server-work-us``) pair (every combination of the values given, or
with ``--pairs`` the first with the first and so on), each mode's rate (the median of
``--rounds`` interleaved runs), its ratio to ``none`` (the median of the rounds' ratios), the
same ratio from CPU alone (``none``'s total CPU per message over the mode's: the rate ratio were
the cores the only limit, steadier on a shared machine) and the CPU per message of the client,
master and slave (``/proc/<pid>/stat`` over the measured seconds, as ``replication_bench.py``
reads them) and the messages per write to the slave (under ``sync``: per round trip);
``--json``: the same as a list of rows. ``benchmarks/safe_modes.sh`` runs it next to
``replication_bench.py`` with client and master costs of 0/0, 20/20 and 40/40 µs, and
``safe_modes_summary.py`` shows the pair whose ``none`` rate is nearest pymq's no-slave rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import multiprocessing
import os
import socket
import statistics
import struct
import time
from pathlib import Path
from typing import Any

BODY = 1024
LOG_SIZE = 256 << 20  # the in-memory log; it wraps (each side on its own) when full
_LEN = struct.Struct("!I")
_OFFSET = struct.Struct("!Q")
ANSWER = bytes(8)
MODES = ("none", "async", "sync")
WARM_SECONDS = 0.5


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc; as ``replication_bench.py``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spin(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU time (not wall time: a spin preempted on the shared
    cores still costs what it says, as the per-message work it stands for would)."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def _nodelay(transport: asyncio.BaseTransport) -> None:
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Log:
    """A preallocated in-memory log: ``append`` copies to its end, wrapping to 0 when it is full."""

    def __init__(self) -> None:
        self.mm = mmap.mmap(-1, LOG_SIZE)
        self.view = memoryview(self.mm)
        self.pos = 0

    def append(self, data: bytes | memoryview) -> None:
        n = len(data)
        if self.pos + n > LOG_SIZE:
            self.pos = 0
        self.view[self.pos : self.pos + n] = data
        self.pos += n


# --- master ---------------------------------------------------------------------------------------


class _Master:
    """Appends requests; streams new bytes to the slave once per tick; answers at once or by the slave's offset."""

    def __init__(self, mode: str, work_us: float, pushes: Any) -> None:
        self.mode = mode
        self.pushes = pushes  # (shared with the client: messages per push = per round trip under sync)
        self.work = work_us / 1e6
        self.log = _Log()
        self.end = 0  # logical offset: bytes appended since the start
        self.sent = 0  # logical offset streamed to the slave
        self.sent_pos = 0  # where in the log the unsent bytes start
        self.slave: asyncio.Transport | None = None
        self.waiters: list[tuple[int, asyncio.Transport]] = []  # (end offset, client), in log order
        self.woken = 0  # waiters[:woken] are answered (trimmed now and then: no deque pops per answer)
        self.push_scheduled = False
        self.loop = asyncio.get_event_loop()

    def put(self, transport: asyncio.Transport, body: memoryview) -> None:
        log = self.log
        if log.pos + len(body) > LOG_SIZE:  # the log wraps: stream what is before the wrap first
            self.push()
            self.sent_pos = 0
        log.append(body)
        self.end += len(body)
        if self.work:
            spin(self.work)
        if self.mode == "sync":
            self.waiters.append((self.end, transport))
        else:
            transport.write(ANSWER)
        if self.slave is not None and not self.push_scheduled:
            self.push_scheduled = True
            self.loop.call_soon(self.push)

    def push(self) -> None:
        """One write of every byte appended since the last push (run once per tick: ``call_soon``)."""
        self.push_scheduled = False
        if self.slave is None or self.sent == self.end:
            return
        pos = self.log.pos
        self.slave.write(self.log.view[self.sent_pos : pos])
        self.pushes.value += 1
        self.sent += pos - self.sent_pos
        self.sent_pos = pos

    def acked(self, offset: int) -> None:
        """The slave holds ``offset`` bytes: answer the waiters it covers (a prefix)."""
        waiters, i = self.waiters, self.woken
        while i < len(waiters) and waiters[i][0] <= offset:
            waiters[i][1].write(ANSWER)
            i += 1
        if i == len(waiters):
            waiters.clear()
            i = 0
        elif i > 1024:
            del waiters[:i]
            i = 0
        self.woken = i


class _ClientSide(asyncio.Protocol):
    def __init__(self, master: _Master) -> None:
        self.master = master
        self.buf = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]  # (uvloop's is no subclass)
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        view, at = memoryview(buf), 0
        while len(buf) - at >= 4:
            (n,) = _LEN.unpack_from(buf, at)
            if len(buf) - at < 4 + n:
                break
            self.master.put(self.transport, view[at + 4 : at + 4 + n])
            at += 4 + n
        view.release()
        del buf[:at]


class _SlaveSide(asyncio.Protocol):
    """The master's end of the slave's connection: reads offset reports (8 bytes each, the latest counts)."""

    def __init__(self, master: _Master, ready: asyncio.Future[None]) -> None:
        self.master = master
        self.ready = ready
        self.buf = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _nodelay(transport)
        self.master.slave = transport  # type: ignore[assignment]
        self.ready.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        whole = len(buf) - len(buf) % 8
        if not whole:
            return
        (offset,) = _OFFSET.unpack_from(buf, whole - 8)
        del buf[:whole]
        if self.master.mode == "sync":
            self.master.acked(offset)


def _master_main(out: multiprocessing.Queue, mode: str, work_us: float, pushes: Any) -> None:  # type: ignore[type-arg]
    loop = _new_loop()
    asyncio.set_event_loop(loop)
    master = _Master(mode, work_us, pushes)
    ready: asyncio.Future[None] = loop.create_future()
    clients = loop.run_until_complete(loop.create_server(lambda: _ClientSide(master), "127.0.0.1", 0))
    ha = loop.run_until_complete(loop.create_server(lambda: _SlaveSide(master, ready), "127.0.0.1", 0))
    out.put((clients.sockets[0].getsockname()[1], ha.sockets[0].getsockname()[1]))
    if mode != "none":
        loop.run_until_complete(ready)  # the slave is connected: the clients may start
        out.put("slave connected")
    loop.run_forever()


# --- slave ----------------------------------------------------------------------------------------


class _Slave(asyncio.Protocol):
    def __init__(self, work_us: float) -> None:
        self.work = work_us / 1e6
        self.log = _Log()
        self.offset = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        self.log.append(data)
        before, self.offset = self.offset, self.offset + len(data)
        self.transport.write(_OFFSET.pack(self.offset))
        if self.work:  # the dispatch, after the report
            spin(self.work * (self.offset // BODY - before // BODY))


def _slave_main(ha_port: int, work_us: float) -> None:
    loop = _new_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(loop.create_connection(lambda: _Slave(work_us), "127.0.0.1", ha_port))
    loop.run_forever()


# --- client ---------------------------------------------------------------------------------------


class _ClientConn(asyncio.Protocol):
    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None
        self.got = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]  # (uvloop's is no subclass)
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= 8 and self.waiter is not None and not self.waiter.done():
            self.got -= 8
            self.waiter.set_result(None)


async def _client(
    port: int, clients: int, seconds: float, work_us: float, pids: dict[str, int], pushes: Any
) -> dict[str, Any]:
    """Closed-loop sends for WARM_SECONDS, then ``seconds`` measured: the rate, each process's CPU, msgs per push."""
    loop = asyncio.get_running_loop()
    frame = _LEN.pack(BODY) + os.urandom(BODY)
    work = work_us / 1e6
    conns = [(await loop.create_connection(_ClientConn, "127.0.0.1", port))[1] for _ in range(clients)]

    async def send(conn: _ClientConn, deadline: float) -> int:
        n = 0
        while time.perf_counter() < deadline:
            conn.waiter = loop.create_future()
            conn.transport.write(frame)
            await conn.waiter
            n += 1
            if work:
                spin(work)
        return n

    warm = time.perf_counter() + WARM_SECONDS
    await asyncio.gather(*(send(c, warm) for c in conns))
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    pushed = pushes.value
    t0 = time.perf_counter()
    n = sum(await asyncio.gather(*(send(c, t0 + seconds) for c in conns)))
    elapsed = time.perf_counter() - t0
    cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    pushed = pushes.value - pushed
    for c in conns:
        c.transport.close()
    out: dict[str, Any] = {"messages": n, "msgs_per_s": round(n / elapsed, 1)}
    for name, used in cpu.items():
        out[f"{name}_cpu_us_per_msg"] = round(used / max(1, n) * 1e6, 1)
    if pushed:
        out["msgs_per_push"] = round(n / pushed, 2)
    return out


def measure(mode: str, args: argparse.Namespace, work_us: float, server_work_us: float) -> dict[str, Any]:
    """One mode: start the master (and the slave), run the client here, stop them (by PID)."""
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    pushes = ctx.Value("q", 0, lock=False)  # the master's writes to the slave
    procs = [ctx.Process(target=_master_main, args=(queue, mode, server_work_us, pushes))]
    try:
        procs[0].start()
        port, ha_port = queue.get(timeout=60)
        pids = {"client": os.getpid(), "master": procs[0].pid or 0}
        if mode != "none":
            procs.append(ctx.Process(target=_slave_main, args=(ha_port, args.slave_work_us)))
            procs[1].start()
            assert queue.get(timeout=60) == "slave connected"
            pids["slave"] = procs[1].pid or 0
        loop = _new_loop()
        try:
            return loop.run_until_complete(_client(port, args.clients, args.seconds, work_us, pids, pushes))
        finally:
            loop.close()
    finally:
        for p in reversed(procs):
            if p.pid is not None:
                p.kill()  # (by its PID: the children this started)
                p.join()


PROCESSES = ("client", "master", "slave")


def cost_row(args: argparse.Namespace, work: float, server_work: float) -> dict[str, Any]:
    """Every mode ``--rounds`` times, interleaved (none, async, sync, none, ...): the medians and the ratios.

    A ratio is the median of the rounds' own ratios (each compares runs seconds apart, which the
    shared cores' drift spares); ``cpu_vs_none`` is the ratio of the medians' total CPU per message
    (client + master + slave), the rate ratio the shape would give were the cores the only limit.
    """
    row: dict[str, Any] = {"work_us": work, "server_work_us": server_work, "slave_work_us": args.slave_work_us}
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in args.modes}
    for _ in range(args.rounds):
        for mode in args.modes:
            runs[mode].append(measure(mode, args, work, server_work))
    for mode, got in runs.items():
        row[mode] = {key: statistics.median(r[key] for r in got) for key in got[0] if key != "messages"} | {
            "rounds_msgs_per_s": [r["msgs_per_s"] for r in got]
        }
    if "none" in runs:
        none_cpu = sum(row["none"].get(f"{p}_cpu_us_per_msg", 0.0) for p in PROCESSES)
        for mode in ("async", "sync"):
            if mode in runs:
                per_round = [m["msgs_per_s"] / n["msgs_per_s"] for m, n in zip(runs[mode], runs["none"], strict=True)]
                row[f"{mode}_vs_none"] = round(statistics.median(per_round), 3)
                cpu = sum(row[mode].get(f"{p}_cpu_us_per_msg", 0.0) for p in PROCESSES)
                row[f"{mode}_cpu_vs_none"] = round(none_cpu / cpu, 3)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0, help="measured seconds per mode (after 0.5 s of warm-up)")
    ap.add_argument("--rounds", type=int, default=1, help="run the modes this many times, interleaved (medians)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="none is the base of the ratios")
    ap.add_argument("--work-us", type=float, nargs="+", default=[0.0], help="client CPU spin per send (several: each)")
    ap.add_argument(
        "--server-work-us", type=float, nargs="+", default=[0.0], help="master CPU spin per request (several: each)"
    )
    ap.add_argument("--slave-work-us", type=float, default=0.0, help="slave CPU spin per message received")
    ap.add_argument(
        "--pairs",
        action="store_true",
        help="pair --work-us and --server-work-us value by value (not every combination)",
    )
    ap.add_argument("--json", action="store_true", help="print a list of rows (one per cost pair) as JSON")
    args = ap.parse_args()
    if args.pairs and len(args.work_us) != len(args.server_work_us):
        ap.error("--pairs needs as many --work-us as --server-work-us values")
    costs = (
        list(zip(args.work_us, args.server_work_us, strict=True))
        if args.pairs
        else [(w, s) for w in args.work_us for s in args.server_work_us]
    )
    rows: list[dict[str, Any]] = []
    for work, server_work in costs:
        rows.append(cost_row(args, work, server_work))
        if not args.json:
            print(_line(rows[-1]), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


def _line(row: dict[str, Any]) -> str:
    head = f"work {row['work_us']:g} us, server {row['server_work_us']:g} us, slave {row['slave_work_us']:g} us:"
    parts = []
    for mode in MODES:
        if mode not in row:
            continue
        r = row[mode]
        ratio = (
            f" ({row[f'{mode}_vs_none']:.2f}; by CPU {row[f'{mode}_cpu_vs_none']:.2f})"
            if f"{mode}_vs_none" in row
            else ""
        )
        cpu = "/".join(f"{r[f'{p}_cpu_us_per_msg']:.1f}" for p in PROCESSES if f"{p}_cpu_us_per_msg" in r)
        rounds = ", ".join(f"{v:,.0f}" for v in r["rounds_msgs_per_s"]) if len(r["rounds_msgs_per_s"]) > 1 else ""
        rounds = f" (rounds {rounds})" if rounds else ""
        per_push = f", {r['msgs_per_push']:.1f} msgs/push" if "msgs_per_push" in r else ""
        parts.append(
            f"{mode:5} {r['msgs_per_s']:8,.0f} msgs/s{ratio} [CPU us/msg client/master/slave {cpu}{per_push}]{rounds}"
        )
    return head + "\n  " + "\n  ".join(parts)


if __name__ == "__main__":
    main()
