"""The floor under ACL + TLS batches: what TLS costs a bare uvloop client and server, no pymq (issue 34).

    python benchmarks/tls_floor_bench.py [--seconds 3] [--rounds 2] [--frame-bytes 70000]
                                         [--work-us 0 ...] [--server-work-us 0 ...] [--pairs] [--json]

Issue 34 asks of pymq's ACL + TLS batches of 64 (``pymq-bench producer --embedded --batch-size
64 --acl --tls``) >= 0.75 of the plain rate. Over TLS pymq authenticates once per connection
(``pymq.security.session``), so what is left is TLS itself: this measures what it costs the same
shape with pymq taken away, in two processes like the real bench:

* the client (this process, uvloop, one connection) sends a 4-byte-length frame of
  ``--frame-bytes`` (a batch of 64 1 KiB messages with its headers is about 70,000), awaits the
  8-byte answer, then spins ``--work-us`` microseconds of CPU time (the producer's per-batch
  encoding);
* the server (a child process, uvloop) reads whole frames, spins ``--server-work-us`` per frame
  (the broker's per-batch handling and store) and answers 8 bytes.

Each mode (``plain``, ``tls``: TLS 1.3, the cipher OpenSSL picks, a throwaway CA and
certificate made with ``openssl`` as ``pymq-bench --embedded --tls`` does) runs ``--seconds``,
interleaved over ``--rounds``. Pick the spins whose plain rate and CPU per frame match pymq's
plain batches in the same minutes (its broker and client CPU per batch): the ``tls / plain``
ratio is then what TLS allows that shape at those costs. An aim above it is not reachable by a
cheaper pymq TLS path, only with cheaper per-batch work or cheaper TLS (a faster cipher or
kernel TLS). On this VM (2026-11-29) spinning on both sides at once (``--work-us 200
--server-work-us 200``) doubled each side's CPU per frame, which one side alone does not (not
understood): ``safe_modes.sh`` spins one side at a time.

Prints per (``--work-us``, ``--server-work-us``) pair (every combination, or with ``--pairs`` the
first with the first and so on) each mode's frames per second (median of the rounds), the
``tls / plain`` ratio (median of the rounds' ratios) and the client's and server's CPU per frame
(``/proc/<pid>/stat`` over the measured seconds); ``--json``: a list of rows.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import ssl
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from pymq.bench.certs import make_server_certs

_LEN = struct.Struct(">I")
_ANSWER = b"\x00" * 8
_TICK = os.sysconf("SC_CLK_TCK")


def spin(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU time (a preempted spin still costs what it says)."""
    if seconds <= 0:
        return
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class _Server(asyncio.Protocol):
    def __init__(self, work: float) -> None:
        self.work = work
        self.buf = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        answers = 0
        while len(buf) >= 4:
            (size,) = _LEN.unpack_from(buf)
            if len(buf) < 4 + size:
                break
            del buf[: 4 + size]
            spin(self.work)
            answers += 1
        if answers:
            self.transport.write(_ANSWER * answers)


def _server_main(ready: Any, certs: tuple[str, str, str], tls: bool, work_us: float) -> None:
    uvloop.install()
    loop = asyncio.new_event_loop()
    context = None
    if tls:
        _ca, cert, key = certs
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
    server = loop.run_until_complete(loop.create_server(lambda: _Server(work_us / 1e6), "127.0.0.1", 0, ssl=context))
    ready.put(server.sockets[0].getsockname()[1])
    loop.run_forever()


class _Client(asyncio.Protocol):
    def __init__(self) -> None:
        self.answers: asyncio.Queue[None] = asyncio.Queue()
        self.pending = 0

    def data_received(self, data: bytes) -> None:
        self.pending += len(data)
        while self.pending >= len(_ANSWER):
            self.pending -= len(_ANSWER)
            self.answers.put_nowait(None)


async def _client(
    port: int, ca: str | None, frame: bytes, seconds: float, work_us: float, server_pid: int
) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    context = None
    if ca is not None:
        context = ssl.create_default_context(cafile=ca)
        context.check_hostname = False
    transport, proto = await loop.create_connection(_Client, "127.0.0.1", port, ssl=context)
    work = work_us / 1e6

    async def one() -> None:
        transport.write(frame)
        await proto.answers.get()
        spin(work)

    for _ in range(50):  # warm-up: handshake done, buffers grown
        await one()
    frames = 0
    t0, c0, s0 = time.perf_counter(), time.process_time(), cpu_seconds(server_pid)
    while time.perf_counter() - t0 < seconds:
        await one()
        frames += 1
    elapsed, client_cpu, server_cpu = (
        time.perf_counter() - t0,
        time.process_time() - c0,
        cpu_seconds(server_pid) - s0,
    )
    transport.close()
    return {
        "frames_per_s": frames / elapsed,
        "client_cpu_us": client_cpu / frames * 1e6,
        "server_cpu_us": server_cpu / frames * 1e6,
    }


def run_mode(
    tls: bool, certs: tuple[str, str, str], frame: bytes, seconds: float, work_us: float, server_work_us: float
) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    proc = ctx.Process(target=_server_main, args=(ready, certs, tls, server_work_us), daemon=True)
    proc.start()
    try:
        port = ready.get(timeout=30)
        assert proc.pid is not None
        return uvloop.run(_client(port, certs[0] if tls else None, frame, seconds, work_us, proc.pid))
    finally:
        proc.kill()
        proc.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--frame-bytes", type=int, default=70_000)
    parser.add_argument("--work-us", type=float, nargs="+", default=[0.0])
    parser.add_argument("--server-work-us", type=float, nargs="+", default=[0.0])
    parser.add_argument("--pairs", action="store_true", help="pair the values in order instead of every combination")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    frame = _LEN.pack(args.frame_bytes) + os.urandom(args.frame_bytes)
    if args.pairs:
        pairs = list(zip(args.work_us, args.server_work_us, strict=True))
    else:
        pairs = list(itertools.product(args.work_us, args.server_work_us))
    rows = []
    with tempfile.TemporaryDirectory(prefix="pymq-tls-floor-") as tmp:
        ca, cert, key = make_server_certs(Path(tmp))
        certs = (str(ca), str(cert), str(key))
        for work_us, server_work_us in pairs:
            runs: dict[str, list[dict[str, float]]] = {"plain": [], "tls": []}
            for r in range(args.rounds):
                order = ("plain", "tls") if r % 2 == 0 else ("tls", "plain")
                for mode in order:
                    runs[mode].append(run_mode(mode == "tls", certs, frame, args.seconds, work_us, server_work_us))
            row: dict[str, Any] = {"work_us": work_us, "server_work_us": server_work_us}
            for mode, results in runs.items():
                for key_ in ("frames_per_s", "client_cpu_us", "server_cpu_us"):
                    row[f"{mode}_{key_}"] = statistics.median(x[key_] for x in results)
            row["tls_vs_plain"] = statistics.median(
                t["frames_per_s"] / p["frames_per_s"] for t, p in zip(runs["tls"], runs["plain"], strict=True)
            )
            rows.append(row)
            if not args.json:
                print(
                    f"work {work_us:g}/{server_work_us:g} µs: plain {row['plain_frames_per_s']:.0f} frames/s "
                    f"(client {row['plain_client_cpu_us']:.0f}, server {row['plain_server_cpu_us']:.0f} µs/frame), "
                    f"tls {row['tls_frames_per_s']:.0f} (client {row['tls_client_cpu_us']:.0f}, "
                    f"server {row['tls_server_cpu_us']:.0f}); tls / plain {row['tls_vs_plain']:.2f}"
                )
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
