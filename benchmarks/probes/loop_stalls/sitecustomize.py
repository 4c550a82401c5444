"""Probe: where and why the broker's event loop stalls (loaded into the broker through PYTHONPATH):

    STALLS=/tmp/stalls.txt PYTHONPATH=benchmarks/probes/loop_stalls \\
        .venv/bin/pymq-bench producer --embedded --quiet --json --duration 10 --concurrency 8
    cat /tmp/stalls.txt

A 1 ms timer on the loop stamps each tick; a watchdog thread checks every 0.5 ms and, when the
loop has not ticked for STALL_MS (default 3), takes every thread's innermost Python frames once
per stall, and at the stall's end how long the loop thread waited on a run queue meanwhile
(``/proc/self/task/TID/schedstat``). Appends the longest stalls when the broker exits. A stall
whose run-queue wait is about its length was the scheduler's (the thread was runnable and
another got the core); else look at the stacks (a thread holding the GIL, a system call).
Measured 2026-11-25 (8 producers, ASYNC_FLUSH, 10 s, 2 cores shared with the client): the
longest stalls, 18 / 7 / 4.5 ms, were run-queue waits of 17.6 / 7.1 / 4.4 ms.
Does nothing without STALLS.
"""

import atexit
import os
import sys
import threading
import time
import traceback

_OUT = os.environ.get("STALLS")
if _OUT:
    import asyncio

    _limit = float(os.environ.get("STALL_MS", "3")) / 1000
    _state = {"tick": 0.0, "loop_thread": 0}
    _stalls: list[tuple[float, str]] = []
    _orig_run = asyncio.BaseEventLoop.run_forever

    def _install(loop: asyncio.AbstractEventLoop) -> None:
        if _state["loop_thread"]:
            return
        _state["loop_thread"] = threading.get_ident()

        def beat() -> None:
            _state["tick"] = time.perf_counter()
            loop.call_later(0.001, beat)

        beat()

        native = threading.get_native_id()

        def run_delay() -> float:
            """Seconds the loop thread has waited on a run queue (runnable, not running) so far."""
            try:
                with open(f"/proc/self/task/{native}/schedstat") as f:
                    return int(f.read().split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                return 0.0

        def watch() -> None:
            current: list[float] = []
            delay_at_start = [0.0]
            while True:
                time.sleep(0.0005)
                now = time.perf_counter()
                gap = now - _state["tick"]
                if gap > _limit:
                    if not current:
                        delay_at_start[0] = run_delay()
                        names = {t.ident: t.name for t in threading.enumerate()}
                        parts = []
                        for ident, frame in sys._current_frames().items():
                            if ident == threading.get_ident():
                                continue
                            who = "LOOP" if ident == _state["loop_thread"] else names.get(ident, ident)
                            inner = traceback.format_stack(frame)[-4:]
                            parts.append(f"[{who}]\n" + "".join(inner))
                        stack = "".join(parts)
                        _stalls.append((gap, stack))
                        current.append(len(_stalls) - 1)
                    else:
                        i = current[0]
                        _stalls[i] = (gap, _stalls[i][1])
                else:
                    if current:
                        i = current[0]
                        waited = run_delay() - delay_at_start[0]
                        note = f"(run-queue wait during it: >= {waited * 1000:.1f} ms)\n"
                        _stalls[i] = (_stalls[i][0], note + _stalls[i][1])
                    current.clear()

        threading.Thread(target=watch, daemon=True, name="stall-watch").start()

    from pymq.transport import server as _server

    _orig_start = _server.RpcServer.start

    async def start(self, *a, **k):  # type: ignore[no-untyped-def]
        _install(asyncio.get_running_loop())
        return await _orig_start(self, *a, **k)

    _server.RpcServer.start = start

    @atexit.register
    def _report() -> None:
        with open(_OUT, "a") as f:
            f.write(f"pid {os.getpid()} {' '.join(sys.argv[:2])}: {len(_stalls)} stalls over {_limit * 1000:.0f} ms\n")
            for gap, stack in sorted(_stalls, reverse=True)[:8]:
                f.write(f"--- {gap * 1000:.1f} ms\n{stack}\n")
