"""What a transactional send costs the broker, in process, next to a plain single send.

    python benchmarks/txn_cost_bench.py [--profile [N]]

A real BrokerApp and server-side Connection on a transport that drops what is written, as
``send_cost_bench.py``. A *plain* round feeds one SEND_MESSAGE frame of a 1 KiB message; a
*transaction* round feeds the same message as a half message (``TRAN_MSG``/``PGROUP``, as
``TransactionProducer.send_half`` sends it), then the oneway END_TRANSACTION commit that
``send_in_transaction`` sends. Only the broker's ``data_received`` calls are timed (building the
END_TRANSACTION frame from where the half landed is not), each followed by a loop turn (what
a request schedules on the loop runs, as it would in a server). Reports this thread's CPU µs per
round, the median of 5 interleaved runs of each, and their ratio; ``--profile`` prints the top
functions by own time of N transaction rounds (cProfile; ``--plain``: of plain sends).
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from pymq.broker.app import BrokerApp
from pymq.broker.transaction.hook import HALF_TOPIC
from pymq.client import broker_api
from pymq.config import SMALL_STORE_SIZES, BrokerConfig
from pymq.logs import configure_logging
from pymq.protocol.command import FLAG_ONEWAY
from pymq.protocol.frame import encode_bytes
from pymq.protocol.record import encode_properties, encode_record
from pymq.protocol.route import TopicConfig
from pymq.protocol.transaction import PGROUP, TRAN_MSG, TRANSACTION_COMMIT_TYPE
from pymq.transport.codec import default_codec
from pymq.transport.connection import Connection
from pymq.transport.limits import ConnectionLimits


class RecordingTransport:
    """A transport that takes every write (the answers are not read)."""

    def writelines(self, bufs: object) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


GROUP = "bench-tx-group"
ROUNDS = 3000


async def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="pymq-txn-cost-"))
    store_settings = {"store_dir": str(root / "broker"), **SMALL_STORE_SIZES, "commitlog_file_size": 256 << 20}
    app = BrokerApp(BrokerConfig.model_validate({"port": 0, "store": store_settings}))
    await app.start()
    try:
        app.topics.upsert(TopicConfig("bench", 1, 1))
        body = os.urandom(1024)
        uniq = {"UNIQ_KEY": "ABCDEF0123456789ABCDEF0123456789"}
        plain = encode_record(b"bench", body, encode_properties(uniq))
        half = encode_record(b"bench", body, encode_properties({**uniq, TRAN_MSG: "true", PGROUP: GROUP}))
        conn = Connection(app.dispatcher, default_codec(16 << 20), server_side=True, limits=ConnectionLimits())
        conn.connection_made(RecordingTransport())  # type: ignore[arg-type]
        cmd = broker_api.send_message("bench", 0, GROUP, plain)
        cmd.opaque = 1
        plain_frame = encode_bytes(cmd)
        cmd = broker_api.send_message("bench", 0, GROUP, half)
        cmd.opaque = 2
        half_frame = encode_bytes(cmd)
        store = app.store
        pc = time.thread_time  # CPU time of this thread: what other processes do disturbs it less than the wall clock

        async def plain_round(n: int) -> float:
            t0 = pc()
            for _ in range(n):
                conn.data_received(plain_frame)
                await asyncio.sleep(0)  # a loop turn, as the transaction rounds have
            return (pc() - t0) / n * 1e6

        #: µs of the half sends and of the END_TRANSACTIONs, per round of the last transaction run
        parts = [0.0, 0.0]

        async def txn_round(n: int) -> float:
            half_s = end_s = 0.0
            for _ in range(n):
                t0 = pc()
                conn.data_received(half_frame)
                half_s += pc() - t0
                qo = store.max_offset(HALF_TOPIC, 0) - 1
                phys = store.physical_offset_at(HALF_TOPIC, 0, qo)
                end = broker_api.end_transaction(GROUP, qo, phys, TRANSACTION_COMMIT_TYPE, msg_id="x", topic="bench")
                end.flags |= FLAG_ONEWAY
                frame = encode_bytes(end)
                t0 = pc()
                conn.data_received(frame)
                await asyncio.sleep(0)  # a loop turn (what the request scheduled runs)
                end_s += pc() - t0
            parts[:] = [half_s / n * 1e6, end_s / n * 1e6]
            return (half_s + end_s) / n * 1e6

        await plain_round(1000)
        await txn_round(1000)
        if "--profile" in sys.argv:
            i = sys.argv.index("--profile")
            n = int(sys.argv[i + 1]) if len(sys.argv) > i + 1 and sys.argv[i + 1].isdigit() else ROUNDS
            prof = cProfile.Profile()
            prof.enable()
            await (plain_round(n) if "--plain" in sys.argv else txn_round(n))
            prof.disable()
            stats = pstats.Stats(prof)
            calls = sum(v[1] for v in stats.stats.values()) / n  # type: ignore[attr-defined]
            print(f"calls per round: {calls:.1f}")
            sort = next((a for a in sys.argv if a in ("cumulative", "tottime", "ncalls")), "tottime")
            stats.sort_stats(sort).print_stats(60)
            return
        plains, txns, halves, ends = [], [], [], []
        for _ in range(5):
            plains.append(await plain_round(ROUNDS))
            txns.append(await txn_round(ROUNDS))
            halves.append(parts[0])
            ends.append(parts[1])
        p, t = statistics.median(plains), statistics.median(txns)
        print(f"plain send        {p:7.2f} us")
        print(f"transaction       {t:7.2f} us  (half send + END_TRANSACTION)")
        print(f"  half send       {statistics.median(halves):7.2f} us")
        print(f"  END_TRANSACTION {statistics.median(ends):7.2f} us")
        print(f"extra             {t - p:7.2f} us  ratio plain/txn {p / t:.3f}")
        assert app.transaction.service().commits >= ROUNDS
    finally:
        await app.close()
        shutil.rmtree(root, ignore_errors=True)


configure_logging("error")
uvloop.run(main())
