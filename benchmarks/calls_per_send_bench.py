"""Python calls per SEND_MESSAGE through a real BrokerApp's dispatcher (cProfile, 5,000 sends after 2,000 warm-up),
and the functions called most, per send: which calls the write path makes, for comparing two checkouts.

    python benchmarks/calls_per_send_bench.py     # from the checkout to measure (with its .venv)
"""

import asyncio
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import put_path_bench as b

from pymq.broker.app import BrokerApp
from pymq.config import BrokerConfig
from pymq.logs import configure_logging
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.record import encode_record
from pymq.protocol.route import TopicConfig

configure_logging("error")


async def main():
    root = Path(tempfile.mkdtemp())
    app = BrokerApp(BrokerConfig.model_validate({"port": 0, "store": {"store_dir": str(root / "broker")}}))
    await app.start()
    try:
        app.topics.upsert(TopicConfig("bench", 8, 8))
        record = memoryview(encode_record(b"bench", os.urandom(1024), b.PROPS))
        ch = b._Channel()
        code = int(RequestCode.SEND_MESSAGE)

        def send(i):
            app.dispatcher.dispatch(
                ch, Command(code, i, 0, None, {"topic": "bench", "queueId": i & 7, "producerGroup": "bench"}, record)
            )

        for i in range(2000):
            send(i)
        p = cProfile.Profile()
        p.enable()
        for i in range(5000):
            send(i)
        p.disable()
        st = pstats.Stats(p)
        print("calls/send", sum(v[1] for v in st.stats.values()) / 5000)
        rows = sorted(((v[1] / 5000, f"{k[0].split('/pymq/')[-1]}:{k[2]}") for k, v in st.stats.items()), reverse=True)
        for n, name in rows[:60]:
            print(f"{n:5.2f} {name}")
    finally:
        await app.close()
        shutil.rmtree(root, ignore_errors=True)


asyncio.run(main())
