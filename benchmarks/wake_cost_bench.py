"""What one sleep and wake-up costs on this machine: two uvloop processes pass one byte back and forth.

    python benchmarks/wake_cost_bench.py [--round-trips 20000]

Nothing else runs in either process: each side's ``data_received`` writes the byte back, so
every round trip is one sleep, one wake-up, one read and one write on each side. The CPU time
of the first side per round trip is the floor of any exchange that waits for the other
process (a SYNC_MASTER's ACK, a single awaited send). On this VM (2026-11-29): 28-29 µs per round
trip (13-15k a second) with the machine otherwise idle, most of it in the kernel's scheduler
(``perf``: ``finish_task_switch``, ``_raw_spin_unlock_irqrestore``): each wake-up wakes an idle
CPU. While a test suite kept both cores busy: 6.5 µs (75k a second; the two sides then take
turns on one core). So an exchange that leaves a core idle between its steps pays the most.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import time

import uvloop


class _Echo(asyncio.Protocol):
    def __init__(self, starts: bool, round_trips: int, done: asyncio.Future[None] | None) -> None:
        self.starts = starts
        self.left = round_trips
        self.done = done
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.starts:
            self.transport.write(b"x")

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.starts:
            self.left -= 1
            if self.left <= 0:
                assert self.done is not None
                self.done.set_result(None)
                return
        self.transport.write(b"x")


async def _side(sock: socket.socket, starts: bool, round_trips: int) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    t0, c0 = time.perf_counter(), time.process_time()
    await loop.create_connection(lambda: _Echo(starts, round_trips, done if starts else None), sock=sock)
    if not starts:
        await asyncio.Event().wait()  # echoes until killed
    await asyncio.wait_for(done, 120)  # (the echoing side died: a timeout, not a hang)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round-trips", type=int, default=20_000)
    n = ap.parse_args().round_trips
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the echoing side: never returns into the caller's code
        try:
            a.close()
            uvloop.run(_side(b, False, n))
        finally:
            os._exit(1)
    b.close()
    try:
        wall, cpu = uvloop.run(_side(a, True, n))
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    print(f"{n / wall:,.0f} round trips/s; CPU per round trip on one side {cpu / n * 1e6:.1f} us")


if __name__ == "__main__":
    main()
